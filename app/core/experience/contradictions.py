"""Answers a later teacher session contradicts: the student answered a task that a captured teacher session, later,
answered with another next action; the entry is flagged (`flags.CONTRADICTED`) naming the session and what the
teacher did instead.

"Where you can tell" means every one of these holds; otherwise the entry is left alone (no flag is a guess):
- the experience is recorded and not flagged yet, and its request ENDS with a user message: the student's answer is
  its first action on that request, the same point the teacher's session can be compared at;
- a captured session (main branch; harness lines and compaction summaries aside) has a user message equal to that
  one after whitespace and case normalisation, sent after the experience was recorded (the message's time, else the
  session's start; with neither, the session is skipped);
- the teacher answered it: the session's next message is an assistant message with text or a tool call, and not
  the student's (capture/actors: the student's own sessions are never read here);
- when the teacher called a tool, the request offered the student a tool of that name (agents name their tools
  differently: a call the student could not make says nothing about its answer);
- the next actions disagree by the judge's "close" agreement (`toolcalls.agreement.close_arguments`): the teacher
  called a tool and the student called another one, or the same one with arguments not close (shell commands:
  another program; edits: another file), or no tool; or the teacher answered in text and the student called a tool.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete, insert, select

from app.core.base.schema import AgentSession, ExperienceRow, MessageRow, RequestKey
from app.core.base.store import Store
from app.core.capture import actors, derived
from app.core.capture.rows import parts_of
from app.core.experience import flags as flagging
from app.core.experience.buffer import flag
from app.core.toolcalls.actions import SHELL_TOOLS, call_path, shell_command
from app.core.toolcalls.agreement import close_arguments
from app.core.toolcalls.convention import message_calls, text_of

SNIPPET = 80  # characters of a command, path or text quoted in a flag
INDEXED = "contradictions.indexed"  # settings key: the newest session time request_keys has seen


@dataclass
class Task:
    """A recorded answer that can be compared: when it was given, the tools it was offered, the student's answer."""

    experience_id: str
    at: datetime
    offered: set[str]
    answer: dict


@dataclass
class Contradiction:
    experience_id: str
    session_id: str
    teacher: str  # what the teacher did, in words
    student: str  # what the student did


def normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _when(stamp: str | None) -> datetime | None:
    try:
        return _utc(datetime.fromisoformat(stamp)) if stamp else None
    except ValueError:
        return None


def tasks(store: Store) -> dict[str, list[Task]]:
    """Recorded, unflagged answers whose request ends with a user message, by that message (normalised)."""
    out: dict[str, list[Task]] = {}
    with store.session() as s:
        rows = s.execute(select(ExperienceRow.id, ExperienceRow.created_at, ExperienceRow.request_json,
                                ExperienceRow.answer_json).where(ExperienceRow.state == "recorded")).all()
    for exp_id, created, request_json, answer_json in rows:
        request = json.loads(request_json or "{}")
        messages = request.get("messages") or []
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        text = normalise(text_of(last.get("content"))) if last.get("role") == "user" else ""
        if text:
            offered = set(flagging.request_tools(request))
            out.setdefault(text, []).append(Task(exp_id, _utc(created), offered, json.loads(answer_json or "{}")))
    return out


def teacher_message(parts: list) -> dict:
    """A captured assistant row's parts as an assistant message (text and tool calls; thinking aside)."""
    calls = [{"function": {"name": p.tool_name or "", "arguments": p.tool_input if isinstance(p.tool_input, dict)
                           else {}}} for p in parts if p.kind == "tool_call"]
    content = "\n".join(p.text for p in parts if p.kind == "text" and p.text.strip())
    return {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}


def key_of(text: str) -> str:
    """The index key of a request's text: a hash of its normalised form (a hit is checked on the text itself)."""
    return hashlib.sha1(normalise(text).encode()).hexdigest()[:16]


USER_ROWS = (MessageRow.role == "user", MessageRow.branch == 0, MessageRow.meta == 0, MessageRow.compact_summary == 0)


def index_requests(store: Store) -> int:
    """Bring `request_keys` up to date for the sessions stored since the last call (all of them the first time);
    returns how many sessions were (re)indexed. The cost follows what is new, not what is stored."""
    return derived.catch_up(store, INDEXED, _keys)


def _keys(db, ids: list[str]) -> None:
    rows = db.execute(select(MessageRow.id, MessageRow.session_id, MessageRow.text)
                      .where(MessageRow.session_id.in_(ids), *USER_ROWS)).all()
    db.execute(delete(RequestKey).where(RequestKey.session_id.in_(ids)))
    if rows:
        db.execute(insert(RequestKey), [dict(message_id=mid, session_id=sid, key=key_of(text or ""))
                                        for mid, sid, text in rows])


def answered(store: Store, wanted: set[str], since: datetime, students: actors.Students | None = None):
    """(session id, time, normalised request, the teacher's next message) for each captured user message in
    `wanted` that the teacher answered, in sessions stored (or updated) since `since`: one last written before
    that holds nothing later. Found through `request_keys` (index_requests), so only the hits are read. The
    student's own sessions, and a next message the student gave (`students`), are no teacher's answer."""
    keys = {key_of(w) for w in wanted}
    q = (select(MessageRow.session_id, MessageRow.seq, MessageRow.text, MessageRow.timestamp, AgentSession.started_at)
         .join(RequestKey, RequestKey.message_id == MessageRow.id)
         .join(AgentSession, AgentSession.id == MessageRow.session_id)
         .where(RequestKey.key.in_(keys), AgentSession.updated_at >= since, AgentSession.actor != actors.STUDENT))
    with store.session() as s:
        hits = [(sid, seq, key, stamp, started) for sid, seq, text, stamp, started in s.execute(q)
                if (key := normalise(text or "")) in wanted]
    if not hits:
        return
    with store.session() as s:
        for sid, seq, key, stamp, started in hits:
            after = s.execute(select(MessageRow.role, MessageRow.parts_json, MessageRow.parts_z, MessageRow.model)
                              .where(MessageRow.session_id == sid, MessageRow.branch == 0, MessageRow.seq > seq,
                                     MessageRow.meta == 0).order_by(MessageRow.seq).limit(1)).first()
            at = _when(stamp) or _when(started)
            if after is None or after.role != "assistant" or at is None or students and students.student(after.model):
                continue
            msg = teacher_message(parts_of(after))
            if msg["content"] or msg.get("tool_calls"):
                yield sid, at, key, msg


def _said(call: dict) -> str:
    name, args = call["name"], call.get("arguments") or {}
    detail = shell_command(args) if name.lower() in SHELL_TOOLS else call_path(call) or ""
    return f"{name}({detail[:SNIPPET]})" if detail else name


def disagreement(teacher: dict, student: dict, offered: set[str]) -> tuple[str, str] | None:
    """(what the teacher did, what the student did) when the next actions disagree; None when they agree or when
    it cannot be told (the teacher's tool was not offered to the student)."""
    wanted, given = message_calls(teacher), message_calls(student)
    if wanted:
        target = wanted[0]
        if target["name"] not in offered:
            return None
        if not given:
            return f"called {_said(target)}", "answered in text"
        first = given[0]
        if first["name"] == target["name"] and close_arguments(first["name"], target, first):
            return None
        return f"called {_said(target)}", f"called {_said(first)}"
    if given:
        return f"answered in text (“{teacher['content'][:SNIPPET]}”)", f"called {_said(given[0])}"
    return None


def scan(store: Store) -> list[Contradiction]:
    """Flag every recorded answer a later teacher session contradicts (where it can be told); returns them."""
    found: dict[str, Contradiction] = {}
    waiting = tasks(store)
    times = [t.at for group in waiting.values() for t in group if t.at is not None]
    if not times:
        return []
    index_requests(store)
    for sid, at, key, teacher in answered(store, set(waiting), min(times), actors.current(store)):
        for task in waiting[key]:
            if task.experience_id in found or task.at is None or at <= task.at:
                continue
            differs = disagreement(teacher, task.answer, task.offered)
            if differs is None:
                continue
            did, student = differs
            flag(store, task.experience_id, flagging.CONTRADICTED,
                 f"a later teacher session ({sid}) on the same task {did}; the student {student}")
            found[task.experience_id] = Contradiction(task.experience_id, sid, did, student)
    return list(found.values())
