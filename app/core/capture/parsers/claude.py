"""Claude Code session files (~/.claude/projects/<slug>/<sessionId>.jsonl) read into the normalised model."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.base.lines import Reading, stream_jsonl
from app.core.capture.parsers.records import ClaudeBlock, ClaudeRecord, claude_line, claude_record, look
from app.core.capture.session import Message, Part, Session
from app.core.capture.spill import Spill

SPAWN_TOOLS = {"Task", "Agent"}  # tool calls that start a sub-agent
SYNTHETIC_MODEL = "<synthetic>"  # Claude Code's placeholder replies (API errors, interruptions)
_AGENT_ID_IN_TEXT = re.compile(r"\bagentId: ([\w@.\-]+)")  # newer Task results end with "agentId: <id> ..."
TYPES = {"user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation", "attachment", "progress",
         "custom-title", "tag"}
KEYS = ("uuid", "parentUuid", "leafUuid", "messageId", "sessionId")


@dataclass
class _Node:  # a record with a place in the uuid/parentUuid tree; it may carry no message (progress, system...)
    key: str  # uuid, or "line:<n>" for a message record without one
    parent: str | None  # parentUuid, or logicalParentUuid across a compaction
    timestamp: str | None
    sidechain: bool
    agent_id: str | None
    api_id: str | None  # message.id: shared by the lines of one split API response
    messages: list[Message]


@dataclass
class _Parse:
    session: Session
    nodes: dict[str, _Node] = field(default_factory=dict)  # in file order
    session_ids: list[str] = field(default_factory=list)
    hints: dict[str, str] = field(default_factory=dict)  # agentId -> call_id of the call that spawned it


def parse_claude(path: str | Path, final: bool = False, progress: Reading | None = None,
                 spill: Spill | None = None) -> Session:
    """One session file: the branch that reached the end, abandoned branches, inline sub-agents, balanced counts (a
    spill: its parts' big texts are kept there as they are read)."""
    return _parse(Path(path), final, progress, spill).session


def parse_claude_with_subagents(path: str | Path, final: bool = False, progress: Reading | None = None,
                                spill: Spill | None = None) -> Session:
    """parse_claude plus sub-agent files: `agent-<id>.jsonl` beside it with its sessionId, `<sessionId>/subagents/`.

    Not read: agent-acompact-* (internal compactions), .meta.json. spawned_by, strongest first: toolUseResult.agentId
    of the call's result, a progress record's data.agentId + parentToolUseID, "agentId: <id>" in the result text;
    else the Task/Agent call whose input["prompt"] is the sub-agent's first user message; else None.
    """
    path = Path(path)
    state = _parse(path, final, progress, spill)
    session = state.session
    for file in subagent_files(path, session.session_id):
        sub = parse_claude(file, final, progress, spill)
        if sub.session_id not in {s.session_id for s in session.subagents}:
            session.subagents.append(sub)
    _link(session, state.hints)
    return session


def _parse(path: Path, final: bool = False, progress: Reading | None = None, spill: Spill | None = None) -> _Parse:
    """Each record becomes a node as it is read (its JSON is not kept), then the chains are resolved."""
    stream = stream_jsonl(path, final=final, progress=progress, typed=claude_line)
    state = _Parse(Session(agent="claude-code", session_id=path.stem, source_path=str(path)))
    for record in stream:
        held = len(state.nodes)
        _take(state, record.line, record.data)
        if spill is not None and len(state.nodes) > held:
            _spill_last(state, spill)
    session = state.session
    session.lines, session.blank, session.end_offset = stream.lines, stream.blank, stream.end_offset
    session.problems = stream.problems + session.problems  # the reader's first, as they were
    _finish(state, path)
    return state


def _take(state: _Parse, line: int, data: Any) -> None:
    """Route one record: a problem, a used record (message / compaction), or a skipped type."""
    session = state.session
    if isinstance(data, dict):  # a line that did not fit the typed record: its plain values
        data = claude_record(data)
    reason = _unusable(data)
    if reason:
        session.problems.append((line, reason))
        return
    kind, message, uuid = data.type, data.message, _str(data.uuid)
    if uuid in state.nodes:
        session.skipped["duplicate"] += 1  # the first record with a uuid wins
        return
    node = _Node(uuid or f"line:{line}", _parent(data), _str(data.timestamp), data.isSidechain is True,
                 _str(data.agentId), _str(message.id) if kind == "assistant" else None,
                 _messages(kind, data, line, session))
    _note(state, data, node)
    boundary = kind == "system" and data.subtype == "compact_boundary"
    session.compactions += boundary
    if boundary or kind in ("user", "assistant") or (kind == "summary" and message is not None):
        session.used += 1
    else:
        session.skipped[kind] += 1
    if uuid or node.messages:  # records with a uuid keep the chain whole even without a message
        state.nodes[node.key] = node


def _spill_last(state: _Parse, spill: Spill) -> None:
    """The big texts of the node just added go to the spill (a dict keeps its order: the last node is the newest)."""
    node = next(reversed(state.nodes.values()))
    for message in node.messages:
        message.parts = [spill.part(p) for p in message.parts]


def _unusable(data: Any) -> str | None:
    if not isinstance(data, ClaudeRecord):
        return f"not a JSON object ({type(data).__name__})"
    if not isinstance(data.type, str) or not data.type:
        return "record has no type"
    if data.type in ("user", "assistant") and data.message is None:
        return f"{data.type} record without a message object"
    return None


def _note(state: _Parse, data: ClaudeRecord, node: _Node) -> None:
    """Session metadata, and agentId -> spawning call_id (from toolUseResult or a progress record)."""
    session, sid = state.session, _str(data.sessionId)
    state.session_ids += [sid] if sid and sid not in state.session_ids else []
    session.cwd = session.cwd or _str(data.cwd)
    session.git_branch = _str(data.gitBranch) or session.git_branch
    session.agent_version = _str(data.version) or session.agent_version
    calls = [p.call_id for m in node.messages for p in m.parts if p.kind == "tool_result"]
    if calls and calls[0]:
        agent = _str(look(data.toolUseResult, "agentId"))
        if agent:
            state.hints.setdefault(agent, calls[0])
    spawner = _str(data.parentToolUseID)
    if spawner:
        agent = _str(look(data.data, "agentId"))
        if agent:
            state.hints.setdefault(agent, spawner)


def _messages(kind: str, data: ClaudeRecord, line: int, session: Session) -> list[Message]:
    """0-2 messages from a user/assistant/summary record; a user line's tool results become a "tool" message."""
    message = data.message
    if kind not in ("user", "assistant", "summary") or message is None:
        return []
    parts = _parts(message.content, session)
    base = dict(id=_str(data.uuid), parent_id=_parent(data), timestamp=_str(data.timestamp),
                line=line, meta=data.isMeta is True)
    if kind == "assistant":  # kept even without parts: a later line of the same response may merge into it
        usage = message.usage if isinstance(message.usage, dict) else {}
        usage = {k: v for k, v in usage.items() if type(v) is int}  # not bool, not nested dicts
        return [Message("assistant", parts, model=_str(message.model), usage=usage, **base)]
    results = [p for p in parts if p.call_id and p.kind in ("tool_result", "image")]
    words = [p for p in parts if not (p.call_id and p.kind in ("tool_result", "image"))]
    summary = kind == "summary" or data.isCompactSummary is True
    out = [Message("tool", results, **base)] if results else []
    return out + ([Message("user", words, compact_summary=summary, **base)] if words else [])


def _parts(content: str | list[ClaudeBlock] | None, session: Session) -> list[Part]:
    if isinstance(content, str):
        return [Part("text", content)] if content else []
    return [p for block in content for p in _block(block, session)] if content else []


def _block(block: ClaudeBlock, session: Session) -> list[Part]:
    kind = block.type
    if kind == "text":
        return [Part(kind, _str(block.text) or "")]
    if kind == "thinking":
        return [Part(kind, _str(block.thinking) or "")]
    if kind == "tool_use":
        return [Part("tool_call", tool_name=_str(block.name), tool_input=block.input, call_id=_str(block.id))]
    if kind == "tool_result":  # its text (a string, or its text blocks joined), then any images it holds
        call_id, content = _str(block.tool_use_id), block.content
        inner = _parts(content, session) if isinstance(content, list) else []
        text = content if isinstance(content, str) else "\n".join(p.text for p in inner if p.kind == "text")
        images = [Part("image", p.text, call_id=call_id) for p in inner if p.kind == "image"]
        return [Part("tool_result", text, call_id=call_id, is_error=block.is_error is True), *images]
    if kind == "image":
        return [Part("image", _str(look(block.source, "media_type")) or "")]
    session.skipped[f"block:{kind if isinstance(kind, str) else 'invalid'}"] += 1
    return []


def _finish(state: _Parse, path: Path) -> None:
    session, nodes, ids = state.session, list(state.nodes.values()), state.session_ids
    own, side = [n for n in nodes if not n.sidechain], [n for n in nodes if n.sidechain]
    if own:
        session.session_id = path.stem if path.stem in ids else (ids[0] if ids else path.stem)
    else:  # a sub-agent's own file: every record is on the sidechain
        own, side = side, []
        session.session_id = next((n.agent_id for n in own if n.agent_id), path.stem.removeprefix("agent-"))
    session.project = (re.split(r"[\\/]", session.cwd.rstrip("\\/"))[-1] or None) if session.cwd else None
    session.started_at, session.ended_at = _span(nodes)
    _assemble(session, own)
    for key, group in _sidechain_groups(side).items():
        sub = Session(agent="claude-code", session_id=key, source_path=session.source_path, cwd=session.cwd,
                      project=session.project, git_branch=session.git_branch, agent_version=session.agent_version)
        sub.started_at, sub.ended_at = _span(group)
        _assemble(sub, group)  # its lines are counted in the parent's lines / used / skipped
        session.subagents.append(sub)
    _link(session, state.hints)


def _assemble(session: Session, nodes: list[_Node]) -> None:
    """messages = root -> last node that carries a message; every other leaf's own segment -> abandoned."""
    parents, by_key = _chain_responses(nodes, _resolve_parents(nodes)), {n.key: n for n in nodes}
    ends = [n for n in nodes if n.messages] or nodes
    path = _walk(ends[-1].key, parents, set()) if ends else []
    session.messages = _merge([by_key[k] for k in path])
    taken, has_child = set(path), set(parents.values())
    for node in nodes:
        if node.key not in has_child and node.key not in taken:
            branch = _walk(node.key, parents, taken)
            taken.update(branch)
            messages = _merge([by_key[k] for k in branch])
            session.abandoned += [messages] if messages else []
    models = [m.model for m in session.messages if m.model and m.model != SYNTHETIC_MODEL]
    session.model = models[-1] if models else None


def _resolve_parents(nodes: list[_Node]) -> dict[str, str | None]:
    """The explicit parent when it is in the file; a null or dangling one continues from the node written before."""
    keys, parents, previous = {n.key for n in nodes}, {}, None
    for node in nodes:
        parents[node.key] = (node.parent if node.parent in keys and node.parent != node.key else None) or previous
        previous = node.key
    return parents


def _chain_responses(nodes: list[_Node], parents: dict[str, str | None]) -> dict[str, str | None]:
    """One API response as one chain, not a fan of leaves (Claude Code 2.x): it writes each block of a response as
    its own line (A -> B -> C), parallel tool results each under the line of their call (R_A -> A, R_B -> B), and
    the next response under the last result written; read as a tree, every other result, and every call after the
    one whose result came last, would be a dead leaf (an "abandoned branch" that nobody rewound). So a response's
    lines, the results that answer only its calls, and the next record hanging off any of them follow each other
    in file order: each is re-hung under the response's latest member (its tail). Only records whose parent is
    already a member move; a line of another response or a real rewind (a new prompt under an earlier point of the
    chain, outside any fan) keeps its parent."""
    member: dict[str, str] = {}  # node key -> api id of the response it belongs to
    tail: dict[str, str] = {}  # api id -> its latest member
    calls: dict[str, set[str]] = {}  # api id -> call ids its lines made
    for node in nodes:
        group = member.get(parents.get(node.key) or "")
        if group is not None:
            parents[node.key] = tail[group]
        if node.api_id and (group == node.api_id or node.api_id not in tail):  # a line of a response
            member[node.key], tail[node.api_id] = node.api_id, node.key
            calls.setdefault(node.api_id, set()).update(
                p.call_id for m in node.messages for p in m.tool_calls() if p.call_id)
        elif group is not None and not node.api_id:
            answers = {p.call_id for m in node.messages if m.role == "tool" for p in m.parts if p.call_id}
            if answers and answers <= calls[group]:  # its results: the response goes on after them
                member[node.key], tail[group] = group, node.key
    return parents


def _walk(key: str | None, parents: dict[str, str | None], stop: set[str]) -> list[str]:
    """Keys from the root (or from below the first key in stop) down to key; safe against cycles."""
    out: dict[str, None] = {}  # ordered and fast to test
    while key is not None and key not in stop and key not in out:
        out[key] = None
        key = parents.get(key)
    return list(out)[::-1]


def _merge(nodes: list[_Node]) -> list[Message]:
    """One message per API response: lines sharing message.id join the first, in order; usage from the last."""
    out: list[Message] = []
    first: dict[str, Message] = {}
    for node in nodes:
        for message in node.messages:
            api = node.api_id if message.role == "assistant" else None
            head = first.get(api) if api else None
            if head is None:
                out.append(message)
                first.update({api: message} if api else {})
                continue
            head.parts.extend(message.parts)
            head.usage = message.usage or head.usage
            head.model = head.model or message.model
    return [m for m in out if m.parts]


def _sidechain_groups(nodes: list[_Node]) -> dict[str, list[_Node]]:
    """Inline sub-agents (older files): by agentId, else by the root of their own parentUuid tree."""
    keys = {n.key for n in nodes}
    parents = {n.key: n.parent if n.parent in keys else None for n in nodes}
    groups: dict[str, list[_Node]] = {}
    for node in nodes:
        groups.setdefault(node.agent_id or _walk(node.key, parents, set())[0], []).append(node)
    return groups


def _link(session: Session, hints: dict[str, str]) -> None:
    """Set spawned_by on each sub-agent not linked yet (see parse_claude_with_subagents for the order)."""
    messages = session.messages + [m for b in session.abandoned for m in b]
    messages += [m for sub in session.subagents for m in sub.messages]
    calls = {p.call_id: p for m in messages for p in m.tool_calls() if p.tool_name in SPAWN_TOOLS and p.call_id}
    for part in (p for m in messages for p in m.parts if p.kind == "tool_result" and p.call_id in calls):
        found = _AGENT_ID_IN_TEXT.search(part.text)
        if found:
            hints.setdefault(found.group(1), part.call_id)
    claimed = {sub.spawned_by for sub in session.subagents if sub.spawned_by}
    for sub in (s for s in session.subagents if not s.spawned_by):
        call_id = hints.get(sub.session_id) or _match(sub, calls, claimed)
        if call_id and call_id not in claimed:
            sub.spawned_by = call_id
            claimed.add(call_id)


def _match(sub: Session, calls: dict[str, Part], claimed: set[str]) -> str | None:
    """The first free spawning call whose input["prompt"] is the sub-agent's first user message."""
    prompt = next((m.text.strip() for m in sub.messages if m.role == "user" and not m.meta), None)
    return next((cid for cid, p in calls.items() if prompt and cid not in claimed and isinstance(p.tool_input, dict)
                 and str(p.tool_input.get("prompt") or "").strip() == prompt), None)


def subagent_files(path: Path, session_id: str) -> list[Path]:
    """A session's sub-agent files, both layouts (agent-acompact-* are internal compactions, not read)."""
    beside = [f for f in sorted(path.parent.glob("agent-*.jsonl")) if f != path and first_session_id(f) == session_id]
    nested = [f for name in dict.fromkeys((path.stem, session_id))
              for f in sorted((path.parent / name / "subagents").glob("agent-*.jsonl"))]
    return [f for f in dict.fromkeys(beside + nested) if not f.name.startswith("agent-acompact")]


def owner(path: Path) -> Path | None:
    """The file whose session this file is part of: a sub-agent file's session's file; None for an internal
    compaction agent's file."""
    if not path.name.startswith("agent-"):
        return path
    if path.name.startswith("agent-acompact"):
        return None
    if path.parent.name == "subagents":  # <sessionId>/subagents/agent-<id>.jsonl
        main = path.parent.parent.parent / f"{path.parent.parent.name}.jsonl"
    else:  # agent-<id>.jsonl beside <sessionId>.jsonl
        sid = first_session_id(path)
        main = path.parent / f"{sid}.jsonl" if sid else path
    return main if main.is_file() else path


def subagent_bytes(main: Path) -> int:
    """The bytes of a session's `<id>/subagents/` beside its file (agent files of the older layout are not looked
    for)."""
    try:
        with os.scandir(main.parent / main.stem / "subagents") as found:
            return sum(entry.stat().st_size for entry in found if entry.name.endswith(".jsonl"))
    except OSError:
        return 0  # none (or gone: the parser says what is wrong)


def detect(rec: dict) -> bool:
    """A Claude Code record: one of its types, with its ids or a message (asked after the other agents: broad)."""
    return rec.get("type") in TYPES and (any(k in rec for k in KEYS) or isinstance(rec.get("message"), dict))


def resembles(rec: dict) -> bool:
    return "type" in rec and any(k in rec for k in ("uuid", "sessionId", "message"))


def first_session_id(file: Path) -> str | None:
    """The sessionId on an agent file's first line: which session an agent file beside it belongs to."""
    with file.open("rb") as fh:
        try:
            head = json.loads(fh.readline())
        except ValueError:
            return None
    return _str(head.get("sessionId")) if isinstance(head, dict) else None


def _span(nodes: list[_Node]) -> tuple[str | None, str | None]:
    """Earliest and latest timestamp: Claude Code writes UTC ISO strings (toISOString), which sort as text."""
    stamps = [n.timestamp for n in nodes if n.timestamp]
    return (min(stamps), max(stamps)) if stamps else (None, None)


def _parent(data: ClaudeRecord) -> str | None:
    return _str(data.parentUuid) or _str(data.logicalParentUuid)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
