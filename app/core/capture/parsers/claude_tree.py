"""A Claude Code file's uuid tree resolved on node numbers: parents, split responses as one chain, the branch that
reached the end, abandoned branches, inline sub-agents' groups, each response's lines merged into one message.

The records are numbered in file order and held by a node store (`claude_nodes`: in memory, or for a huge file on
disk with their messages in a spill); what is kept per node here is a few integers in arrays, so a file of a million
records costs tens of MB, and a node's messages are read only when its branch is merged."""
from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, MutableSequence, Sequence
from typing import Protocol

from app.core.capture.session import Message, Session

SYNTHETIC_MODEL = "<synthetic>"  # Claude Code's placeholder replies (API errors, interruptions)


class Tree(Protocol):
    """What a node store gives the resolution: per node number its explicit parent's number (-1: none, or not in
    the file), its response's number (-1: not an assistant line; equal for the lines of one API response), whether
    it is on the sidechain, the call numbers it made (an assistant line) or answered (a tool results' line); `emit`
    adds node i's k-th message to a sink (merged: other lines were joined to it)."""

    n: int
    parent: Sequence[int]
    api: Sequence[int]
    side: Sequence[int]
    apis: int  # response numbers are below this
    calls: int  # call numbers are below this

    def ids(self, i: int) -> Sequence[int]: ...
    def has(self, i: int) -> bool: ...
    def messages(self, i: int) -> list[Message]: ...
    def key(self, i: int) -> str: ...
    def agent(self, i: int) -> str | None: ...
    def stamps(self) -> Iterator[tuple[int, str]]: ...
    def sink(self) -> MutableSequence[Message]: ...
    def emit(self, out: MutableSequence[Message], i: int, k: int, message: Message, merged: bool) -> None: ...


class Scratch:
    """Arrays by node, response and call number, made once per file. The groups (the main session, each inline
    sub-agent) share no node, so what is kept by node is never reset; what is kept by response or call is, after
    each use."""

    def __init__(self, tree: Tree) -> None:
        n = tree.n
        self.parents, self.member, self.seen, self.next = (array("i", [-1]) * n for _ in range(4))
        self.taken, self.has_child, self.follows = bytearray(n), bytearray(n), bytearray(n)
        self.tail, self.first, self.last = (array("i", [-1]) * tree.apis for _ in range(3))
        self.owner = array("i", [-1]) * tree.calls
        self.walks = 0


def assemble(session: Session, tree: Tree, nodes: Sequence[int], group: Sequence[int], g: int,
             s: Scratch) -> None:
    """messages = root -> last node that carries a message; every other leaf's own segment -> abandoned (nodes:
    the group's, in file order; group[i] = g for each of them)."""
    parents = _resolve_parents(tree, nodes, group, g, s)
    _chain_responses(tree, nodes, parents, s)
    end = next((i for i in reversed(nodes) if tree.has(i)), nodes[-1] if len(nodes) else -1)
    path = _walk(end, parents, None, s) if end >= 0 else array("i")
    session.messages, session.model = _merge(tree, path, s)
    taken, has_child = s.taken, s.has_child
    for i in path:
        taken[i] = 1
    for i in nodes:
        if parents[i] >= 0:
            has_child[parents[i]] = 1
    for i in nodes:
        if not has_child[i] and not taken[i]:
            branch = _walk(i, parents, taken, s)
            for k in branch:
                taken[k] = 1
            messages, _ = _merge(tree, branch, s)
            session.abandoned += [messages] if messages else []


def _resolve_parents(tree: Tree, nodes: Sequence[int], group: Sequence[int], g: int, s: Scratch) -> array:
    """The explicit parent when it is in the group; a null or dangling one continues from the node written before."""
    parents, parent, previous = s.parents, tree.parent, -1
    for i in nodes:
        p = parent[i]
        parents[i] = p if p >= 0 and p != i and group[p] == g else previous
        previous = i
    return parents


def _chain_responses(tree: Tree, nodes: Sequence[int], parents: array, s: Scratch) -> None:
    """One API response as one chain, not a fan of leaves (Claude Code 2.x): it writes each block of a response as
    its own line (A -> B -> C), parallel tool results each under the line of their call (R_A -> A, R_B -> B), and
    the next response under the last result written; read as a tree, every other result, and every call after the
    one whose result came last, would be a dead leaf (an "abandoned branch" that nobody rewound). So a response's
    lines, the results that answer only its calls, and the next record hanging off any of them follow each other
    in file order: each is re-hung under the response's latest member (its tail). Only records whose parent is
    already a member move; a line of another response or a real rewind (a new prompt under an earlier point of the
    chain, outside any fan) keeps its parent."""
    member, tail, owner, api = s.member, s.tail, s.owner, tree.api
    more: dict[int, set[int]] = {}  # call -> the other responses that made it too (a call id written twice)
    for i in nodes:
        p = parents[i]
        group = member[p] if p >= 0 else -1
        if group >= 0:
            parents[i] = tail[group]
        a = api[i]
        if a >= 0 and (group == a or tail[a] < 0):  # a line of a response
            member[i], tail[a] = a, i
            for c in tree.ids(i):
                if owner[c] < 0:
                    owner[c] = a
                elif owner[c] != a:
                    more.setdefault(c, set()).add(a)
        elif group >= 0 and a < 0:
            answers = tree.ids(i)  # its results: the response goes on after them
            if len(answers) and all(owner[c] == group or group in more.get(c, ()) for c in answers):
                member[i], tail[group] = group, i
    for i in nodes:  # by response and call number: reset for the next group
        if api[i] >= 0:
            tail[api[i]] = -1
            for c in tree.ids(i):
                owner[c] = -1


def _walk(i: int, parents: Sequence[int], stop: bytearray | None, s: Scratch) -> array:
    """Node numbers from the root (or from below the first one in stop) down to i; safe against cycles."""
    s.walks += 1
    mark, seen, out = s.walks, s.seen, array("i")
    while i >= 0 and not (stop is not None and stop[i]) and seen[i] != mark:
        seen[i] = mark
        out.append(i)
        i = parents[i]
    out.reverse()
    return out


def _merge(tree: Tree, branch: Sequence[int], s: Scratch) -> tuple[MutableSequence[Message], str | None]:
    """One message per API response: lines sharing message.id join the first, in order; usage from the last. Also
    the last model that is no placeholder. Each line's messages are read once: the first line of a response reads
    the others (chained by `next`) as it is merged."""
    api, first, last, chained, follows = tree.api, s.first, s.last, s.next, s.follows
    for i in branch:
        a = api[i]
        if a >= 0 and tree.has(i):
            if first[a] < 0:
                first[a] = i
            else:
                chained[last[a]], follows[i] = i, 1
            last[a] = i
    out, model = tree.sink(), None
    for i in branch:
        if follows[i]:
            continue
        for k, message in enumerate(tree.messages(i)):
            j = chained[i] if api[i] >= 0 else -1
            merged = j >= 0
            while j >= 0:
                for more in tree.messages(j):
                    message.parts.extend(more.parts)
                    message.usage = more.usage or message.usage
                    message.model = message.model or more.model
                j = chained[j]
            if message.parts:
                tree.emit(out, i, k, message, merged)
                model = message.model if message.model and message.model != SYNTHETIC_MODEL else model
    for i in branch:
        if api[i] >= 0:
            first[api[i]] = last[api[i]] = -1
    return out, model


def sidechain_groups(tree: Tree, nodes: Iterable[int]) -> dict[str, array]:
    """Inline sub-agents (older files): by agentId, else by the root of their own parentUuid tree (a root found
    once is kept for the nodes below it)."""
    parent, side, s = tree.parent, tree.side, _Roots(tree.n)
    parents = s.parents
    listed = array("i", nodes)
    for i in listed:
        p = parent[i]
        parents[i] = p if p >= 0 and side[p] else -1
    groups: dict[str, array] = {}
    for i in listed:
        name = tree.agent(i) or tree.key(s.root(i))
        groups.setdefault(name, array("i")).append(i)
    return groups


class _Roots:
    def __init__(self, n: int) -> None:
        self.parents, self.found, self.seen = array("i", [-1]) * n, array("i", [-1]) * n, array("i", [-1]) * n
        self.walks = 0

    def root(self, i: int) -> int:
        """The top of i's walk up (the last node before a revisit, in a cycle)."""
        self.walks += 1
        path = array("i")
        while i >= 0 and self.found[i] < 0 and self.seen[i] != self.walks:
            self.seen[i] = self.walks
            path.append(i)
            i = self.parents[i]
        if i >= 0 and self.found[i] >= 0:  # joined a walk that reached a root
            top = self.found[i]
        elif i < 0:  # reached a root itself
            top = path[-1]
        else:  # a cycle: nothing here is kept for others
            return path[-1]
        for k in path:
            self.found[k] = top
        return top


def span(tree: Tree, group: Sequence[int] | None = None) -> dict[int, tuple[str, str]]:
    """Earliest and latest timestamp by group number (every node in group 0 when no groups are given): Claude Code
    writes UTC ISO strings (toISOString), which sort as text."""
    out: dict[int, list[str]] = {}
    for i, stamp in tree.stamps():
        g = group[i] if group is not None else 0
        got = out.get(g)
        if got is None:
            out[g] = [stamp, stamp]
        elif stamp < got[0]:
            got[0] = stamp
        elif stamp > got[1]:
            got[1] = stamp
    return {g: (low, high) for g, (low, high) in out.items()}
