"""Claude Code session files (~/.claude/projects/<slug>/<sessionId>.jsonl) read into the normalised model."""
from __future__ import annotations

import json
import os
import re
from array import array
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from app.core.base.lines import Reading, stream_jsonl
from app.core.capture.parsers.records import ClaudeBlock, ClaudeRecord, claude_line, claude_record, look
from app.core.capture.parsers.claude_nodes import Held, OnDisk
from app.core.capture.parsers.claude_tree import Scratch, assemble, sidechain_groups, span
from app.core.capture.session import Message, Part, Session
from app.core.capture.spill import Spill

SPAWN_TOOLS = {"Task", "Agent"}  # tool calls that start a sub-agent
_AGENT_ID_IN_TEXT = re.compile(r"\bagentId: ([\w@.\-]+)")  # newer Task results end with "agentId: <id> ..."
TYPES = {"user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation", "attachment", "progress",
         "custom-title", "tag"}
KEYS = ("uuid", "parentUuid", "leafUuid", "messageId", "sessionId")


@dataclass
class _Parse:
    session: Session
    nodes: Held | OnDisk  # the records with a place in the uuid/parentUuid tree, numbered in file order
    session_ids: list[str] = field(default_factory=list)
    hints: dict[str, str] = field(default_factory=dict)  # agentId -> call_id of the call that spawned it


def parse_claude(path: str | Path, final: bool = False, progress: Reading | None = None,
                 spill: Spill | None = None) -> Session:
    """One session file: the branch that reached the end, abandoned branches, inline sub-agents, balanced counts (a
    spill: its records wait on disk as they are read, and its sessions' messages are read back from the spill)."""
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
    """Each record becomes a node as it is read (its JSON is not kept), then the chains are resolved; with a spill
    the nodes wait on disk (claude_nodes.OnDisk) and the session's messages are a SpilledMessages."""
    stream = stream_jsonl(path, final=final, progress=progress, typed=claude_line)
    nodes = OnDisk(spill) if spill is not None else Held()
    state = _Parse(Session(agent="claude-code", session_id=path.stem, source_path=str(path)), nodes)
    try:
        for record in stream:
            _take(state, record.line, record.data)
        session = state.session
        session.lines, session.blank, session.end_offset = stream.lines, stream.blank, stream.end_offset
        session.problems = stream.problems + session.problems  # the reader's first, as they were
        _finish(state, path)
    finally:
        nodes.close()
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
    # a Text field is a string or None (parsers/records): "" reads as None, as a missing value
    kind, message, uuid, stamp = data.type, data.message, data.uuid or None, data.timestamp or None
    parent = data.parentUuid or data.logicalParentUuid or None
    api = (message.id or None) if kind == "assistant" else None  # message.id: shared by the lines of one split response
    fields = (parent, stamp, data.isSidechain is True, data.agentId or None, api)
    if uuid and not state.nodes.claim(uuid, *fields):
        session.skipped["duplicate"] += 1  # the first record with a uuid wins
        return
    messages = _messages(kind, data, line, session, uuid, parent, stamp) if message is not None else []
    _note(state, data, messages)
    boundary = kind == "system" and data.subtype == "compact_boundary"
    session.compactions += boundary
    if boundary or kind in ("user", "assistant") or (kind == "summary" and message is not None):
        session.used += 1
    else:
        session.skipped[kind] += 1
    # records with a uuid keep the chain whole even without a message; one without is known by its line number
    if uuid or (messages and state.nodes.claim(line, *fields)):
        state.nodes.fill(messages, _call_ids(api, messages) if messages else ())


def _call_ids(api: str | None, messages: list[Message]) -> tuple[str, ...]:
    """The call ids a response's line makes, or those a record's tool results answer (claude_tree chains them)."""
    if api:
        return tuple(p.call_id for m in messages for p in m.parts if p.kind == "tool_call" and p.call_id)
    return tuple(p.call_id for m in messages if m.role == "tool" for p in m.parts if p.call_id)


def _unusable(data: Any) -> str | None:
    if not isinstance(data, ClaudeRecord):
        return f"not a JSON object ({type(data).__name__})"
    if not isinstance(data.type, str) or not data.type:
        return "record has no type"
    if data.type in ("user", "assistant") and data.message is None:
        return f"{data.type} record without a message object"
    return None


def _note(state: _Parse, data: ClaudeRecord, messages: list[Message]) -> None:
    """Session metadata, and agentId -> spawning call_id (from toolUseResult or a progress record)."""
    session, sid = state.session, data.sessionId
    if sid and sid not in state.session_ids:
        state.session_ids.append(sid)
    if not session.cwd:
        session.cwd = data.cwd or None
    session.git_branch = data.gitBranch or session.git_branch
    session.agent_version = data.version or session.agent_version
    if messages:  # the first tool result's call, when its toolUseResult names the agent it started
        call = next((p.call_id for m in messages for p in m.parts if p.kind == "tool_result"), None)
        agent = _str(look(data.toolUseResult, "agentId")) if call else None
        if agent:
            state.hints.setdefault(agent, call)
    spawner = data.parentToolUseID
    if spawner:
        agent = _str(look(data.data, "agentId"))
        if agent:
            state.hints.setdefault(agent, spawner)


RESULTS = ("tool_result", "image")  # a user line's parts that answer a call (with its call id): its "tool" message


def _messages(kind: str, data: ClaudeRecord, line: int, session: Session, uuid: str | None, parent: str | None,
              stamp: str | None) -> list[Message]:
    """0-2 messages from a user/assistant/summary record; a user line's tool results become a "tool" message."""
    if kind not in ("user", "assistant", "summary"):
        return []
    message = data.message
    parts, meta = _parts(message.content, session), data.isMeta is True
    if kind == "assistant":  # kept even without parts: a later line of the same response may merge into it
        usage = message.usage
        usage = {k: v for k, v in usage.items() if type(v) is int} if isinstance(usage, dict) else {}  # no bool
        return [Message("assistant", parts, uuid, parent, stamp, message.model or None, usage, meta=meta, line=line)]
    results, words = [], []
    for p in parts:
        (results if p.call_id and p.kind in RESULTS else words).append(p)
    summary = kind == "summary" or data.isCompactSummary is True
    out = [Message("tool", results, uuid, parent, stamp, meta=meta, line=line)] if results else []
    if words:
        out.append(Message("user", words, uuid, parent, stamp, compact_summary=summary, meta=meta, line=line))
    return out


def _parts(content: str | list[ClaudeBlock] | None, session: Session) -> list[Part]:
    if isinstance(content, str):
        return [Part("text", content)] if content else []
    out: list[Part] = []
    for block in content or ():
        kind = block.type
        if kind == "text":
            out.append(Part(kind, block.text or ""))
        elif kind == "tool_use":
            out.append(Part("tool_call", tool_name=block.name or None, tool_input=block.input,
                            call_id=block.id or None))
        else:
            out += _block(block, session)
    return out


def _block(block: ClaudeBlock, session: Session) -> list[Part]:
    kind = block.type
    if kind == "thinking":
        return [Part(kind, block.thinking or "")]
    if kind == "tool_result":  # its text (a string, or its text blocks joined), then any images it holds
        call_id, content = block.tool_use_id or None, block.content
        inner = _parts(content, session) if isinstance(content, list) else []
        text = content if isinstance(content, str) else "\n".join(p.text for p in inner if p.kind == "text")
        images = [Part("image", p.text, call_id=call_id) for p in inner if p.kind == "image"]
        return [Part("tool_result", text, call_id=call_id, is_error=block.is_error is True), *images]
    if kind == "image":
        return [Part("image", _str(look(block.source, "media_type")) or "")]
    session.skipped[f"block:{kind if isinstance(kind, str) else 'invalid'}"] += 1
    return []


def _finish(state: _Parse, path: Path) -> None:
    session, ids, tree = state.session, state.session_ids, state.nodes.resolve()
    side = tree.side
    own = array("i", range(tree.n)) if 1 not in side else array("i", (i for i in range(tree.n) if not side[i]))
    group = array("i", [0]) * tree.n  # 0: the session's own; k: the k-th inline sub-agent
    if own:
        session.session_id = path.stem if path.stem in ids else (ids[0] if ids else path.stem)
        groups = sidechain_groups(tree, (i for i in range(tree.n) if tree.side[i]))
    else:  # a sub-agent's own file: every record is on the sidechain
        own, groups = array("i", range(tree.n)), {}
        session.session_id = tree.session_agent() or path.stem.removeprefix("agent-")
    for k, nodes in enumerate(groups.values(), 1):
        for i in nodes:
            group[i] = k
    session.project = (re.split(r"[\\/]", session.cwd.rstrip("\\/"))[-1] or None) if session.cwd else None
    spans = span(tree, group)
    if spans:
        session.started_at = min(low for low, _ in spans.values())
        session.ended_at = max(high for _, high in spans.values())
    scratch = Scratch(tree)
    assemble(session, tree, own, group, 0, scratch)
    for k, (key, nodes) in enumerate(groups.items(), 1):
        sub = Session(agent="claude-code", session_id=key, source_path=session.source_path, cwd=session.cwd,
                      project=session.project, git_branch=session.git_branch, agent_version=session.agent_version)
        sub.started_at, sub.ended_at = spans.get(k, (None, None))
        assemble(sub, tree, nodes, group, k, scratch)  # its lines are counted in the parent's lines / used / skipped
        session.subagents.append(sub)
    _link(session, state.hints)


def _link(session: Session, hints: dict[str, str]) -> None:
    """Set spawned_by on each sub-agent not linked yet (see parse_claude_with_subagents for the order). One pass
    over the messages (a huge session's are read back from its spill once), none when every sub-agent is linked."""
    if all(sub.spawned_by for sub in session.subagents):
        return  # nothing to link: the hints it would add are added again, in the same order, by a later call
    calls: dict[str, Part] = {}
    named: list[tuple[str | None, str]] = []  # (call id, agent id) of each tool result naming an agent, in order
    for m in chain(session.messages, *session.abandoned, *(sub.messages for sub in session.subagents)):
        for p in m.parts:
            if p.kind == "tool_call" and p.tool_name in SPAWN_TOOLS and p.call_id:
                calls[p.call_id] = p
            elif p.kind == "tool_result" and "agentId: " in p.text:
                found = _AGENT_ID_IN_TEXT.search(p.text)
                if found:
                    named.append((p.call_id, found.group(1)))
    for call_id, agent in named:
        if call_id in calls:
            hints.setdefault(agent, call_id)
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


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
