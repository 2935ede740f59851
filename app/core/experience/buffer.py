"""The experience buffer in the store: record an answered request (already scrubbed), flag it, take a client's
feedback, list and count entries, and keep the buffer within its size and age."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select

from app.core.base.schema import CorrectionRow, ExperienceRow
from app.core.base.store import Store
from app.core.experience import flags
from app.core.experience.config import BufferConfig
from app.core.experience.errors import ExperienceError, no_experience

RATINGS = ("up", "down")


@dataclass
class Recorded:
    """What the server hands over for one answered request (scrubbed before it reaches the store)."""

    id: str
    request: dict
    answer: dict
    client: str = ""
    model: str = ""
    model_sha256: str = ""
    route: str = "chat"
    finish_reason: str = ""
    latency_ms: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    created_at: datetime | None = None
    reasons: list[dict] = field(default_factory=list)


def record(store: Store, entry: Recorded) -> str:
    """Store one entry, flagged when it needs improvement (the reasons are computed when not given)."""
    reasons = entry.reasons or flags.needs_improvement(entry.request, entry.answer, entry.finish_reason,
                                                   entry.request.get("max_tokens"))
    row = ExperienceRow(id=entry.id, client=entry.client[:120], model=entry.model, model_sha256=entry.model_sha256,
                        route=entry.route, request_json=json.dumps(entry.request), answer_json=json.dumps(entry.answer),
                        finish_reason=entry.finish_reason or "", latency_ms=entry.latency_ms,
                        prompt_tokens=entry.prompt_tokens, completion_tokens=entry.completion_tokens,
                        state="flagged" if reasons else "recorded", reasons_json=json.dumps(reasons))
    if entry.created_at is not None:
        row.created_at = entry.created_at
    with store.session() as s:
        s.add(row)
    return entry.id


def _row(s, exp_id: str) -> ExperienceRow:
    row = s.get(ExperienceRow, exp_id)
    if row is None:
        raise no_experience(exp_id)
    return row


def flag(store: Store, exp_id: str, kind: str, text: str) -> dict:
    """Add a reason to an entry (once per kind); a flagged entry waits for a correction."""
    with store.session() as s:
        row = _row(s, exp_id)
        reasons = json.loads(row.reasons_json or "[]")
        if not any(r["kind"] == kind for r in reasons):
            reasons.append(flags.reason(kind, text))
            row.reasons_json = json.dumps(reasons)
        if row.state == "recorded":
            row.state = "flagged"
        return view(row)


def feedback(store: Store, exp_id: str, rating: str, correction: Any = None, note: str = "", by: str = "http") -> dict:
    """A client's word on an answer: up or down, with an optional corrected answer (text or an assistant message),
    which is validated like a teacher's. A malformed call is refused with what was wrong; nothing is changed then."""
    if rating not in RATINGS:
        raise ExperienceError(f"rating must be 'up' or 'down', not {rating!r}", fix='send {"rating": "down"}')
    answer = _correction_message(correction) if correction is not None else None
    with store.session() as s:
        row = _row(s, exp_id)
        row.feedback = rating
    if rating == "down":
        flag(store, exp_id, flags.CLIENT, "the client marked the answer bad" + (f": {note.strip()}" if note.strip() else ""))
    if answer is not None:
        from app.core.experience import corrections

        corrections.offer(store, exp_id, answer, source="client", by=by)
    return get(store, exp_id)


def _correction_message(value: Any) -> dict:
    if isinstance(value, str) and value.strip():
        return {"role": "assistant", "content": value}
    if isinstance(value, dict) and value.get("role", "assistant") == "assistant" and (
            isinstance(value.get("content"), str) or value.get("tool_calls")):
        return {"role": "assistant", **{k: v for k, v in value.items() if k in ("content", "tool_calls")}}
    raise ExperienceError("the correction must be the better answer's text or an assistant message",
                          why=f"got {type(value).__name__}: {str(value)[:80]!r}",
                          fix='send "correction": "the better answer" or {"role": "assistant", "content": "…"}')


def view(row: ExperienceRow, full: bool = False) -> dict[str, Any]:
    """An entry as plain data (full: with the request and the answer)."""
    out = {"id": row.id, "created_at": row.created_at.isoformat() if row.created_at else None, "client": row.client,
           "model": row.model, "model_sha256": row.model_sha256, "route": row.route, "state": row.state,
           "reasons": json.loads(row.reasons_json or "[]"), "feedback": row.feedback,
           "finish_reason": row.finish_reason, "latency_ms": row.latency_ms, "prompt_tokens": row.prompt_tokens,
           "completion_tokens": row.completion_tokens, "attempts": row.attempts,
           "next_try_at": row.next_try_at.isoformat() if row.next_try_at else None, "last_error": row.last_error}
    if full:
        out["request"], out["answer"] = json.loads(row.request_json), json.loads(row.answer_json)
    return out


def get(store: Store, exp_id: str) -> dict[str, Any]:
    """One entry with its request, answer and corrections."""
    from app.core.experience import corrections

    with store.session() as s:
        out = view(_row(s, exp_id), full=True)
    out["corrections"] = corrections.of(store, exp_id)
    return out


def entries(store: Store, state: str | None = None, kind: str | None = None, limit: int = 50) -> list[dict]:
    """The newest entries, optionally in one state or flagged for one kind of reason."""
    q = select(ExperienceRow).order_by(ExperienceRow.created_at.desc())
    if state:
        q = q.where(ExperienceRow.state == state)
    if kind:
        q = q.where(ExperienceRow.reasons_json.like(f'%"kind": "{kind}"%'))
    with store.session() as s:
        return [view(r) for r in s.scalars(q.limit(limit))]


def counts(store: Store) -> dict[str, Any]:
    """Entries by state, flagged entries by reason, corrections by state."""
    with store.session() as s:
        by_state = dict(s.execute(select(ExperienceRow.state, func.count()).group_by(ExperienceRow.state)).all())
        fixes = dict(s.execute(select(CorrectionRow.state, func.count()).group_by(CorrectionRow.state)).all())
        reasons = [json.loads(r) for r in s.scalars(select(ExperienceRow.reasons_json)
                                                    .where(ExperienceRow.reasons_json != "[]"))]
    by_reason = {k: sum(any(r["kind"] == k for r in rs) for rs in reasons) for k in flags.KINDS}
    return {"total": sum(by_state.values()), "by_state": by_state, "by_reason": by_reason, "corrections": fixes}


def prune(store: Store, cfg: BufferConfig, now: datetime | None = None) -> int:
    """Delete entries older than the age limit, then the oldest beyond the size limit; an entry whose correction is
    accepted or waiting for review is kept until it is decided. Returns how many were deleted."""
    now = now or datetime.now(UTC)
    keep = select(CorrectionRow.experience_id).where(CorrectionRow.state.in_(("waiting", "accepted")))
    with store.session() as s:
        old = s.execute(delete(ExperienceRow).where(ExperienceRow.created_at < now - timedelta(days=cfg.max_age_days),
                                                    ExperienceRow.id.not_in(keep))).rowcount
        total = s.scalar(select(func.count()).select_from(ExperienceRow))
        extra = max(0, total - cfg.max_rows)
        if extra:
            ids = list(s.scalars(select(ExperienceRow.id).where(ExperienceRow.id.not_in(keep))
                                 .order_by(ExperienceRow.created_at).limit(extra)))
            s.execute(delete(ExperienceRow).where(ExperienceRow.id.in_(ids)))
            old += len(ids)
    return old
