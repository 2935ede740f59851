"""Corrections of flagged experiences: offered (validated, scrubbed, stored), reviewed, and handed to training."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from app.core.base.schema import CorrectionRow, ExperienceRow
from app.core.base.store import Store
from app.core.scrub.scrubber import Scrubber
from app.core.experience import config, validate
from app.core.experience.errors import ExperienceError, no_experience

SOURCES = ("teacher", "client")
PENDING = ("waiting", "accepted")  # a correction in these states stands for its experience (state "corrected")


class CorrectionError(ExperienceError):
    """A correction that cannot be offered or decided: which one, its state, what to do instead."""



@dataclass
class Trainable:
    """An accepted correction as training material: an SFT example (prompt + chosen) and a preference pair (chosen =
    the correction, rejected = the student's answer), with its provenance."""

    correction_id: int
    experience_id: str
    prompt: list[dict]
    chosen: dict
    rejected: dict
    tools: list[dict] = field(default_factory=list)
    teacher_model: str = ""
    source: str = "teacher"
    created_at: str = ""
    cost: float = 0.0


def offer(store: Store, exp_id: str, answer: dict, source: str = "teacher", by: str = "validation",
          teacher_model: str = "", prompt_tokens: int = 0, completion_tokens: int = 0, cost: float = 0.0,
          finish_reason: str = "stop") -> dict:
    """Validate a better answer for an experience and store it (scrubbed): rejected with the reasons, waiting for a
    person's review (when review is required) or accepted. Accepted or waiting makes the experience "corrected"."""
    if source not in SOURCES:
        raise CorrectionError(f"a correction's source must be one of {', '.join(SOURCES)}, not {source!r}")
    review = config.buffer(store).require_review
    min_score = config.teacher(store).min_score
    with store.session() as s:
        exp = experience_row(s, exp_id)
        request = json.loads(exp.request_json or "{}")
    verdict = validate.check(request, answer, finish_reason, min_score)
    state = "rejected" if not verdict.ok else "waiting" if review else "accepted"
    message = Scrubber().values([validate.as_message(answer) if isinstance(answer, dict) else answer])[0]
    now = _now()
    row = CorrectionRow(experience_id=exp_id, created_at=now, source=source, teacher_model=teacher_model,
                        answer_json=json.dumps(message), state=state, reason=validate.summary(verdict),
                        score=verdict.score, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                        cost=cost, decided_at=None if state == "waiting" else now,
                        decided_by="" if state == "waiting" else by)
    with store.session() as s:
        s.add(row)
        s.flush()
        if state in PENDING:
            experience_row(s, exp_id).state = "corrected"
        return view(row)


def of(store: Store, exp_id: str) -> list[dict]:
    """An experience's corrections, oldest first."""
    q = select(CorrectionRow).where(CorrectionRow.experience_id == exp_id).order_by(CorrectionRow.id)
    with store.session() as s:
        return [view(r) for r in s.scalars(q)]


def get(store: Store, correction_id: int) -> dict:
    with store.session() as s:
        return view(_correction(s, correction_id))


def decide(store: Store, correction_id: int, accept: bool, by: str = "user", reason: str = "") -> dict:
    """A person's review of a waiting correction: accepted (it may train) or rejected (with the reason). Rejecting
    the experience's last pending correction puts the experience back to "flagged"."""
    with store.session() as s:
        row = _correction(s, correction_id)
        if row.state != "waiting":
            raise CorrectionError(f"correction {correction_id} is {row.state}, not waiting for review",
                                  why=f"It was decided by {row.decided_by or 'validation'}"
                                      + (f": {row.reason}" if row.reason else ""),
                                  fix="Only a correction waiting for review can be accepted or rejected; "
                                      "`nightschool experience show <experience id>` lists an entry's corrections")
        row.state = "accepted" if accept else "rejected"
        row.decided_at, row.decided_by = _now(), by
        if not accept:
            row.reason = reason.strip() or f"rejected by {by}"
        elif reason.strip():
            row.reason = f"{row.reason}; {reason.strip()}" if row.reason else reason.strip()
        _settle(s, row.experience_id)
        return view(row)


def waiting(store: Store) -> list[dict]:
    """Corrections waiting for a person's review, oldest first, each with its experience (without the request)."""
    q = (select(CorrectionRow, ExperienceRow).join(ExperienceRow, CorrectionRow.experience_id == ExperienceRow.id)
         .where(CorrectionRow.state == "waiting").order_by(CorrectionRow.id))
    with store.session() as s:
        return [{**view(c), "experience": _entry(e)} for c, e in s.execute(q)]


def trainable(store: Store) -> list[Trainable]:
    """Accepted corrections as training material, oldest first."""
    q = (select(CorrectionRow, ExperienceRow).join(ExperienceRow, CorrectionRow.experience_id == ExperienceRow.id)
         .where(CorrectionRow.state == "accepted").order_by(CorrectionRow.created_at, CorrectionRow.id))
    with store.session() as s:
        return [_trainable(c, e) for c, e in s.execute(q)]


def _trainable(c: CorrectionRow, e: ExperienceRow) -> Trainable:
    request, student = json.loads(e.request_json or "{}"), json.loads(e.answer_json or "{}")
    return Trainable(correction_id=c.id, experience_id=e.id, prompt=list(request.get("messages") or []),
                     chosen=json.loads(c.answer_json), rejected=validate.as_message(student),
                     tools=list(request.get("tools") or []), teacher_model=c.teacher_model, source=c.source,
                     created_at=_iso(c.created_at), cost=c.cost)


def _settle(s, exp_id: str) -> None:
    """The experience's state from its corrections: corrected while one is accepted or waiting, else flagged."""
    exp = s.get(ExperienceRow, exp_id)
    if exp is None:
        return
    pending = s.scalar(select(CorrectionRow.id).where(CorrectionRow.experience_id == exp_id,
                                                      CorrectionRow.state.in_(PENDING)).limit(1))
    exp.state = "corrected" if pending is not None else "flagged"


def experience_row(s, exp_id: str) -> ExperienceRow:
    """The entry a correction is for (looked up here: buffer imports this module, not the other way round)."""
    row = s.get(ExperienceRow, exp_id)
    if row is None:
        raise no_experience(exp_id)
    return row


def _entry(row: ExperienceRow) -> dict[str, Any]:
    """The experience a waiting correction is for, in short (buffer.get has it in full)."""
    return {"id": row.id, "created_at": _iso(row.created_at), "client": row.client, "model": row.model,
            "state": row.state, "reasons": json.loads(row.reasons_json or "[]"), "feedback": row.feedback}


def _correction(s, correction_id: int) -> CorrectionRow:
    row = s.get(CorrectionRow, correction_id)
    if row is None:
        raise CorrectionError(f"there is no correction {correction_id}",
                              fix="use an id from `nightschool experience show <experience id>`")
    return row


def view(row: CorrectionRow) -> dict[str, Any]:
    """A correction as plain data, with its provenance."""
    return {"id": row.id, "experience_id": row.experience_id, "source": row.source, "teacher_model": row.teacher_model,
            "answer": json.loads(row.answer_json or "{}"), "state": row.state, "reason": row.reason,
            "score": row.score, "prompt_tokens": row.prompt_tokens, "completion_tokens": row.completion_tokens,
            "cost": row.cost, "created_at": _iso(row.created_at), "decided_at": _iso(row.decided_at),
            "decided_by": row.decided_by}


def _iso(value: datetime | None) -> str | None:
    """ISO time with its zone (SQLite hands back naive UTC times)."""
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()


def _now() -> datetime:
    return datetime.now(UTC)
