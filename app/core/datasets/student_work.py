"""The student's own captured work offered to the experience buffer while it is on: each action the student took in a
captured session (capture/actors) becomes an entry — the request and the turn so far as its context, the action as its
answer — flagged as the server's answers are (experience/flags), and when its tool call failed, so the contradiction
scan and the teacher's corrections reach it. A session is offered once per version stored (a watermark, as capture's
derived tables keep); an action older than the buffer's age limit is left out."""
from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from app.core.base.schema import AgentSession, ExperienceRow, MessageRow
from app.core.base.store import Store
from app.core.capture import actors, derived
from app.core.datasets.convert import row_messages, starts_turn, system_message
from app.core.experience import buffer, config, flags

ROUTE = "session"  # the entry's route: an action of a captured session (the server's are chat | completion)
OFFERED = "experience.student_offered"  # settings key: the newest session time offered
ERROR_PREFIX = "[error] "  # how convert marks a failed tool result
FAILED_CHARS = 160


def offer(store: Store, now: datetime | None = None) -> dict:
    """Offer what the student did in the sessions stored since the last offer; {offered, flagged} or why none."""
    cfg = config.buffer(store)
    if not cfg.enabled:
        return {"offered": 0, "flagged": 0, "why": "the experience buffer is off"}
    names, since = actors.current(store), (now or datetime.now(UTC)) - timedelta(days=cfg.max_age_days)
    found: list[buffer.Recorded] = []

    def take(db, ids: list[str]) -> None:
        sessions = db.scalars(select(AgentSession).where(AgentSession.id.in_(ids),
                                                         AgentSession.actor.in_((actors.STUDENT, actors.MIXED))))
        for session in sessions:
            rows = db.scalars(select(MessageRow).where(MessageRow.session_id == session.id, MessageRow.branch == 0)
                              .order_by(MessageRow.seq)).all()
            found.extend(e for e in entries(session, rows, names) if e.created_at is None or e.created_at >= since)

    derived.catch_up(store, OFFERED, take)
    with store.session() as db:
        known = set(db.scalars(select(ExperienceRow.id).where(ExperienceRow.id.in_([e.id for e in found]))))
    fresh = [e for e in found if e.id not in known]  # a session stored again: its actions already offered stay
    for entry in fresh:
        buffer.record(store, entry)
    return {"offered": len(fresh), "flagged": sum(1 for e in fresh if e.reasons)}


def entries(session: Any, rows: list[Any], names: actors.Students) -> list[buffer.Recorded]:
    """One entry per assistant message of the student's in the session's main branch."""
    read = list(row_messages(rows))
    failed = {m["tool_call_id"]: m["content"][len(ERROR_PREFIX):] for _, msgs in read for m in msgs
              if m["role"] == "tool" and m["content"].startswith(ERROR_PREFIX)}
    tools = sorted({c["function"]["name"] for _, msgs in read for m in msgs for c in m.get("tool_calls") or []})
    schemas = [{"type": "function", "function": {"name": t, "parameters": {"type": "object"}}} for t in tools]
    first: dict | None = None
    turn: list[dict] = []
    out = []
    for row, msgs in read:
        if starts_turn(row):
            first, turn = first or msgs[0], []
        if row.role == "assistant" and msgs and names.student(row.model):
            context = [system_message(tools), *([first] if first is not None and turn[:1] != [first] else []), *turn]
            request = {"messages": [_wire(m) for m in context], "tools": schemas, "model": row.model}
            answer = _wire(msgs[0])
            out.append(buffer.Recorded(
                id=_entry_id(session.id, row.seq), request=request, answer=answer, client=f"{session.agent} session",
                model=row.model or "", route=ROUTE, finish_reason="tool_calls" if answer.get("tool_calls") else "stop",
                created_at=_when(row.timestamp), reasons=_reasons(request, answer, failed)))
        turn += msgs
    return out


def _reasons(request: dict, answer: dict, failed: dict[str, str]) -> list[dict]:
    """The server's reasons, and a failed tool call (its result's first words)."""
    out = flags.needs_improvement(request, answer, answer.get("finish_reason", ""))
    for call in answer.get("tool_calls") or []:
        if call["id"] in failed:
            said = " ".join(failed[call["id"]].split())[:FAILED_CHARS]
            out.append(flags.reason(flags.TOOL_FAILED, f"its {call['function']['name']} call failed: {said}"))
            break
    return out


def _wire(message: dict) -> dict:
    """A dataset message as the OpenAI API takes it (a call's arguments as JSON text)."""
    if not message.get("tool_calls"):
        return dict(message)
    calls = [{**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"])}}
             for c in message["tool_calls"]]
    return {**message, "tool_calls": calls}


def _entry_id(session_id: str, seq: int) -> str:
    return "cap-" + hashlib.sha1(f"{session_id}\0{seq}".encode()).hexdigest()[:24]


def _when(stamp: str | None) -> datetime | None:
    try:
        found = datetime.fromisoformat(stamp) if stamp else None
    except ValueError:
        return None
    return found if found is None or found.tzinfo else found.replace(tzinfo=UTC)
