"""The blind test: a person (or the teacher) shown the agent's recorded next action and the student's, A and B in a
drawn order, asked which is the agent's; one row per test, one per trial."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.base.schema.base import Base, utcnow


class BlindTestRow(Base):
    """One blind test of a model (checkpoint_id null: the base model) on its held-out next actions, the student's
    answers read from one evaluation (eval_id); `judge` says who answers: "person" or "teacher"."""

    __tablename__ = "blind_tests"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    base_model: Mapped[str] = mapped_column(Text)
    checkpoint_id: Mapped[int | None] = mapped_column(ForeignKey("checkpoints.id"), nullable=True, index=True)
    label: Mapped[str] = mapped_column(Text)  # the model as people read it ("base", "#12 job-… final")
    eval_id: Mapped[int | None] = mapped_column(ForeignKey("evals.id"), nullable=True)
    eval_set: Mapped[str] = mapped_column(Text, default="")
    eval_set_sha256: Mapped[str] = mapped_column(String(64), default="")
    judge: Mapped[str] = mapped_column(String(20), default="person")  # person | teacher
    seed: Mapped[int] = mapped_column(Integer, default=0)  # the draw's seed: which next actions, which side
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class BlindTrialRow(Base):
    """One trial: a held-out context, the teacher's action and the student's answer (kept here, so the trial outlives
    the evaluation's files and can become a preference pair), which side is the agent's, and the answer: the pick
    ("A", "B", "cant_tell"; null: not answered yet), which answer is better ("A", "B", "same"; null: not said), the
    seconds it took."""

    __tablename__ = "blind_trials"
    __table_args__ = (UniqueConstraint("test_id", "position", name="uq_blind_trials_position"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    test_id: Mapped[int] = mapped_column(ForeignKey("blind_tests.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)  # the order shown, 0 first
    context_key: Mapped[str] = mapped_column(String(64))  # evalset / datasets.contexts.Context.key
    session_id: Mapped[str] = mapped_column(Text, default="")
    turn: Mapped[int] = mapped_column(Integer, default=0)
    context_json: Mapped[str] = mapped_column(Text)  # the messages the student saw (scrubbed, as the set holds them)
    teacher: Mapped[str] = mapped_column(Text)  # the agent's action, Hermes text
    student: Mapped[str] = mapped_column(Text)  # the student's answer, raw text
    outcome: Mapped[str] = mapped_column(String(20), default="")  # the evaluation's next-action outcome
    agent_side: Mapped[str] = mapped_column(String(1))  # A | B
    pick: Mapped[str | None] = mapped_column(String(10), nullable=True)  # A | B | cant_tell
    better: Mapped[str | None] = mapped_column(String(4), nullable=True)  # A | B | same
    seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    answered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


def student_was(agent_side: str, better: str | None) -> str | None:
    """The judge's word on the student's answer from which answer they found better: "worse" (the agent's side),
    "better" (the other side), "same"; None when they did not say."""
    if better is None:
        return None
    return "same" if better == "same" else ("worse" if better == agent_side else "better")
