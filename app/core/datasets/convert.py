"""A stored session -> one chat conversation in the documented tool convention (OpenAI-style messages).

System: the agent preamble naming the tools the session used. Assistant: text (and thinking as <think>…</think>)
plus `tool_calls` [{id, type: function, function: {name, arguments: dict}}]. Tool results: one `tool` message per
call with `tool_call_id` and `name`. Harness-injected lines are left out; compaction summaries stay as context.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from collections.abc import Iterator
from typing import Any

from app.core.capture.actors import Students
from app.core.capture.rows import parts_of
from app.core.datasets.shorten import clip
from app.core.toolcalls.convention import TOOL_CONVENTION

SYSTEM_PREAMBLE = ("You are a coding agent working in a software project. Work step by step: look before you change "
                   "anything, call one tool at a time, read its result, and recover from errors.")
SUMMARY_PREFIX = "[Summary of the earlier part of this session]\n"


@dataclass
class Conversation:
    """One session as chat messages, with what the filters and splits need to know about it."""

    session_id: str
    parent_id: str | None
    started_at: str
    messages: list[dict] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    student_turns: int = 0  # turns the student acted in, left out (a mixed session's)

    @property
    def content_sha256(self) -> str:
        blob = json.dumps(self.messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def text(self) -> str:
        """All the words, for near-duplicate detection."""
        return "\n".join(_message_text(m) for m in self.messages if m["role"] != "system")


def tools_line(tools: list[str]) -> str:
    """How a system message names the tools and the call convention ("" without tools)."""
    return f" Tools: {', '.join(tools)}. {TOOL_CONVENTION}" if tools else ""


def system_message(tools: list[str]) -> dict:
    """The system message every example and every evaluation prompt starts with (the same convention)."""
    return {"role": "system", "content": SYSTEM_PREAMBLE + tools_line(tools)}


def _message_text(m: dict) -> str:
    calls = " ".join(json.dumps(c["function"], sort_keys=True) for c in m.get("tool_calls") or [])
    return f"{m.get('content') or ''} {calls}".strip()


def _assistant(parts: list, thinking: bool) -> dict | None:
    texts = [p.text for p in parts if p.kind == "text" and p.text.strip()]
    thoughts = [p.text for p in parts if p.kind == "thinking" and p.text.strip()] if thinking else []
    content = "\n".join(texts)
    if thoughts:
        content = "<think>\n" + "\n".join(thoughts) + "\n</think>\n" + content
    calls = [{"id": p.call_id or f"call_{i}", "type": "function",
              "function": {"name": p.tool_name or "unknown", "arguments": _arguments(p.tool_input)}}
             for i, p in enumerate(q for q in parts if q.kind == "tool_call")]
    if not content.strip() and not calls:
        return None
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = calls
    return msg


def _arguments(value: Any) -> dict:
    if isinstance(value, dict):
        return value
    if value is None:
        return {}
    return {"input": value}


def _tool_results(parts: list, names: dict[str, str], limit: int) -> list[dict]:
    out = []
    for p in parts:
        if p.kind != "tool_result":
            continue
        text = (clip(p.text or "", limit) if limit > 0 else p.text or "") or "(no output)"
        if p.is_error:
            text = "[error] " + text
        call_id = p.call_id or "unknown"
        out.append({"role": "tool", "tool_call_id": call_id, "name": names.get(call_id, "unknown"), "content": text})
    return out


def row_messages(rows: list[Any], thinking: bool = True, max_tool_output: int = 2000) -> Iterator[tuple[Any, list]]:
    """Each main-branch row (ordered by seq) but the harness's, with the chat messages it becomes (an empty
    assistant row or user line: none)."""
    names: dict[str, str] = {}
    for row in rows:
        if row.meta:
            continue
        parts = parts_of(row)
        if row.role == "assistant":
            msg = _assistant(parts, thinking)
            for call in (msg or {}).get("tool_calls", []):
                names[call["id"]] = call["function"]["name"]
            yield row, [msg] if msg else []
        elif row.role == "tool":
            yield row, _tool_results(parts, names, max_tool_output)
        elif row.role == "user" and row.text.strip():
            yield row, [{"role": "user", "content": (SUMMARY_PREFIX + row.text) if row.compact_summary else row.text}]


def starts_turn(row: Any) -> bool:
    """A person's request (not a compaction summary): it starts a turn, as capture/session.Session.turns says."""
    return row.role == "user" and not row.compact_summary and not row.meta and bool(row.text.strip())


def conversation(session: Any, rows: list[Any], thinking: bool = True, max_tool_output: int = 2000,
                 students: Students | None = None) -> Conversation:
    """Build the conversation of one session from its main-branch message rows (ordered by seq). With `students`, a
    turn (a request and everything done for it) in which the student acted is left out whole: the student's own
    work is never a teacher example (counted in `student_turns`)."""
    turns: list[list[dict]] = [[]]
    by_student = [False]
    for row, msgs in row_messages(rows, thinking, max_tool_output):
        if starts_turn(row):
            turns.append([])
            by_student.append(False)
        if row.role == "assistant" and students is not None and students.student(row.model):
            by_student[-1] = True
        turns[-1] += msgs
    messages = [m for turn, student in zip(turns, by_student) if not student for m in turn]
    tools = sorted({c["function"]["name"] for m in messages for c in m.get("tool_calls") or []})
    return Conversation(session.id, session.parent_id, session.started_at or "", [system_message(tools), *messages],
                        tools, student_turns=sum(by_student))


def _completed_at(messages: list[dict], i: int) -> bool:
    """An assistant message is a completed action when every tool call it made got a result, or, with no call, when
    it answered (the next message is not another assistant message of the same turn)."""
    m = messages[i]
    if m["role"] != "assistant":
        return False
    calls = {c.get("id", "") for c in m.get("tool_calls") or []}
    if calls:
        return calls <= {r.get("tool_call_id") for r in messages[i + 1:] if r["role"] == "tool"}
    return bool((m.get("content") or "").strip()) and (i + 1 == len(messages) or messages[i + 1]["role"] != "assistant")


def completed_turns(messages: list[dict]) -> list[dict]:
    """An interrupted session up to its last completed action; the unfinished tail (a request never answered, a
    pending call, a result nobody answered) is cut. [] when nothing was completed."""
    last = next((i for i in range(len(messages) - 1, -1, -1) if _completed_at(messages, i)), None)
    return [] if last is None else messages[:last + 1]


def trimmed(conv: Conversation) -> Conversation | None:
    """The conversation of an interrupted session cut to its completed turns (the system message names only the tools
    those turns used); None when no action was completed."""
    kept = completed_turns(conv.messages)
    if not any(m["role"] == "assistant" for m in kept):
        return None
    tools = sorted({c["function"]["name"] for m in kept for c in m.get("tool_calls") or []})
    return Conversation(conv.session_id, conv.parent_id, conv.started_at, [system_message(tools), *kept[1:]], tools)
