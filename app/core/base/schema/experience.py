"""The experience buffer: answered requests, their corrections, the teacher's calls."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.core.base.schema.base import Base, utcnow


class ExperienceRow(Base):
    """One request the built-in server answered while the experience buffer was on: what was asked and what the
    student said (both scrubbed like captured sessions), who asked, which model answered, how fast; and whether the
    answer needs improvement (with the reasons) and where its correction stands."""

    __tablename__ = "experiences"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # also sent to the client as X-Nightschool-Experience
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    client: Mapped[str] = mapped_column(String(120), default="")  # the client's label (header, `user` field or agent)
    model: Mapped[str] = mapped_column(Text, default="")  # the served model's name (a checkpoint's export)
    model_sha256: Mapped[str] = mapped_column(String(64), default="")
    route: Mapped[str] = mapped_column(String(40), default="chat")  # chat | completion
    request_json: Mapped[str] = mapped_column(Text, default="{}")  # scrubbed: messages, tools, parameters
    answer_json: Mapped[str] = mapped_column(Text, default="{}")  # scrubbed: the assistant message
    finish_reason: Mapped[str] = mapped_column(String(20), default="")
    latency_ms: Mapped[float] = mapped_column(Float, default=0.0)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(20), default="recorded", index=True)  # recorded | flagged | corrected
    reasons_json: Mapped[str] = mapped_column(Text, default="[]")  # [{kind, text}] why it needs improvement
    feedback: Mapped[str | None] = mapped_column(String(10), nullable=True)  # up | down
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # teacher tries
    next_try_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)  # why the last teacher try failed


class CorrectionRow(Base):
    """A better answer for a flagged experience: the teacher's (or the client's own) answer, validated, and whether
    it may train (accepted), waits for a person's review, or was rejected (with the reason); with its provenance."""

    __tablename__ = "corrections"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    experience_id: Mapped[str] = mapped_column(ForeignKey("experiences.id", ondelete="CASCADE"), index=True)
    source: Mapped[str] = mapped_column(String(20), default="teacher")  # teacher | client
    teacher_model: Mapped[str] = mapped_column(Text, default="")
    answer_json: Mapped[str] = mapped_column(Text, default="{}")  # scrubbed assistant message
    state: Mapped[str] = mapped_column(String(20), index=True)  # waiting | accepted | rejected
    reason: Mapped[str] = mapped_column(Text, default="")  # why rejected, or what validation found
    score: Mapped[float] = mapped_column(Float, default=0.0)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost: Mapped[float] = mapped_column(Float, default=0.0)  # in the currency of the teacher's prices (settings)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    decided_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    decided_by: Mapped[str] = mapped_column(String(20), default="")  # validation | user | cli | mcp


class TeacherCallRow(Base):
    """One call to the teacher's API: when, for which experience, how it ended and the tokens it used (the daily
    token budget is the sum of these)."""

    __tablename__ = "teacher_calls"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    experience_id: Mapped[str] = mapped_column(String(40), default="")
    status: Mapped[str] = mapped_column(String(20))  # answered | unreachable | rate_limited | error
    http_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    retry_after_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str] = mapped_column(Text, default="")


class RequestKey(Base):
    """A captured user message (main branch, not harness or compaction) by a hash of its normalised text: the
    contradiction scan finds the sessions that asked what a recorded request asked without reading every message.
    Kept by the scan itself for sessions stored since it last looked; a message's key goes with it."""

    __tablename__ = "request_keys"
    message_id: Mapped[int] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(40), index=True)  # a session stored again: its keys replaced
    key: Mapped[str] = mapped_column(String(16), index=True)
