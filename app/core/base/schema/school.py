"""The learning cycles and the marks a person or an agent gave sessions."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.core.base.schema.base import Base, utcnow


class CycleRow(Base):
    """One learning cycle, a persisted state machine: the stage it is in, what each stage produced, when each started
    and ended, how often each was started or resumed (a stage never starts twice), and why it ended as it did."""

    __tablename__ = "cycles"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    base_model: Mapped[str] = mapped_column(Text)
    stage: Mapped[str] = mapped_column(String(20))  # building | training | refining | judging | exporting | deploying
    state: Mapped[str] = mapped_column(String(20), index=True)  # running | approval | done | refused | failed
    trigger: Mapped[str] = mapped_column(Text, default="")  # what started it, in words
    inputs_json: Mapped[str] = mapped_column(Text, default="{}")
    outputs_json: Mapped[str] = mapped_column(Text, default="{}")  # stage -> what it produced (ids, names)
    times_json: Mapped[str] = mapped_column(Text, default="{}")  # stage -> {started, ended, seconds}
    starts_json: Mapped[str] = mapped_column(Text, default="{}")  # stage -> times started fresh
    resumes_json: Mapped[str] = mapped_column(Text, default="{}")  # stage -> times resumed after a restart
    reason: Mapped[str] = mapped_column(Text, default="")
    report_json: Mapped[str] = mapped_column(Text, default="{}")
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class SessionMark(Base):
    """A person's or an agent's word on a captured session: good (weight > 1: repeated in datasets) or bad (0: left
    out)."""

    __tablename__ = "session_marks"
    session_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    weight: Mapped[float] = mapped_column(Float)
    note: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
