"""A parsed (and scrubbed) Session as rows for the sessions and messages tables, signals included."""
from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import orjson

from app.core.base.schema import utcnow
from app.core.capture.session import Message, Part, Session
from app.core.capture.behaviour import signals

TITLE_CHARS = 120


def session_rows(sid: str, session: Session, parent: str | None = None) -> tuple[list[dict], list[dict]]:
    """The session and its sub-agents (each its own row, linked by parent_id and spawned_by), and their messages."""
    sessions, messages = session_records(sid, session, parent)
    return sessions, list(messages)


def session_records(sid: str, session: Session, parent: str | None = None) -> tuple[list[dict], Iterator[dict]]:
    """session_rows with the message rows made one at a time as they are taken (a huge session's rows are never
    all in memory at once)."""
    sessions, messages = [_session_row(sid, session, parent)], [_message_rows(sid, session)]
    for sub in session.subagents:
        sub_id = hashlib.sha1(f"{sid}\0{sub.session_id}".encode()).hexdigest()[:20]
        more_sessions, more_messages = session_records(sub_id, sub, parent=sid)
        sessions += more_sessions
        messages.append(more_messages)
    return sessions, itertools.chain.from_iterable(messages)


def _session_row(sid: str, session: Session, parent: str | None) -> dict:
    sig = signals(session)
    usage = session.usage()
    tool_calls = sum(len(m.tool_calls()) for m in session.messages)
    return dict(
        id=sid, agent=session.agent, native_id=session.session_id, parent_id=parent, spawned_by=session.spawned_by,
        source_path=session.source_path, project=session.project, cwd=session.cwd, git_branch=session.git_branch,
        agent_version=session.agent_version, model=session.model, started_at=session.started_at,
        ended_at=session.ended_at, day=_day(session.started_at or session.ended_at),
        messages=len(session.messages), turns=sum(1 for t in session.turns() if t.request), tool_calls=tool_calls,
        errors=sig.errors, input_tokens=usage.get("input_tokens", 0), output_tokens=usage.get("output_tokens", 0),
        compactions=session.compactions, abandoned_branches=len(session.abandoned), outcome=sig.outcome,
        exploration=sig.exploration, signals_json=json.dumps(sig.as_dict()), secrets_scrubbed=0,
        title=_title(session), updated_at=utcnow())


def _message_rows(sid: str, session: Session) -> Iterator[dict]:
    for branch, msgs in enumerate([session.messages, *session.abandoned]):
        for seq, m in enumerate(msgs):
            yield _message_row(sid, branch, seq, m)


def _message_row(sid: str, branch: int, seq: int, m: Message) -> dict:
    tools = ",".join(p.tool_name or "?" for p in m.parts if p.kind == "tool_call")
    return dict(session_id=sid, branch=branch, seq=seq, role=m.role, text=m.text,
                parts_json=_dumps([_part(p) for p in m.parts]), tools=tools,
                is_error=int(any(p.is_error for p in m.parts)), timestamp=m.timestamp, model=m.model,
                compact_summary=int(m.compact_summary), meta=int(m.meta), line=m.line)


def _part(p: Part) -> dict[str, Any]:
    """Compact JSON for a part: k kind, t text, n tool name, i tool input, c call id, e error."""
    out: dict[str, Any] = {"k": p.kind}
    for key, value in (("t", p.text), ("n", p.tool_name), ("i", p.tool_input), ("c", p.call_id), ("e", p.is_error)):
        if value not in (None, "", False):
            out[key] = value
    return out


def _dumps(value: Any) -> str:
    """orjson (several times faster); the standard encoder for what orjson refuses (e.g. integers over 64 bits)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value, ensure_ascii=False)


def parts_of(parts_json: str) -> list[Part]:
    """Back from the stored JSON to Parts (for the transcript viewer and dataset building)."""
    return [Part(d.get("k", "text"), d.get("t", ""), d.get("n"), d.get("i"), d.get("c"), bool(d.get("e")))
            for d in json.loads(parts_json or "[]")]


def _title(session: Session) -> str:
    for m in session.messages:
        if m.role == "user" and not m.meta and not m.compact_summary and m.text.strip():
            return " ".join(m.text.split())[:TITLE_CHARS]
    return ""


def _day(stamp: str | None) -> str | None:
    """YYYY-MM-DD in UTC from an ISO stamp (Z or offset); None when unreadable."""
    if not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp[:10] if len(stamp) >= 10 and stamp[4] == "-" else None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return moment.date().isoformat()
