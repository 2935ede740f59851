"""Built datasets, the sessions each one used, and the held-out set."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.base.schema.base import Base, utcnow


class BuiltDataset(Base):
    """A dataset built from sessions (SFT) or from a student's answers (preference): immutable once registered."""

    __tablename__ = "built_datasets"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(80), unique=True)
    kind: Mapped[str] = mapped_column(String(20))  # sft | preference
    base_model: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    spec_id: Mapped[str] = mapped_column(String(40))
    template_sha256: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(Text)
    mode: Mapped[str] = mapped_column(String(20))  # full | incremental | pairs
    examples: Mapped[int] = mapped_column(Integer, default=0)
    train: Mapped[int] = mapped_column(Integer, default=0)
    val: Mapped[int] = mapped_column(Integer, default=0)
    test: Mapped[int] = mapped_column(Integer, default=0)
    excluded: Mapped[int] = mapped_column(Integer, default=0)
    manifest_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class DatasetSession(Base):
    """Which sessions a built dataset used, in which split, with the content hash they had then."""

    __tablename__ = "dataset_sessions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("built_datasets.id", ondelete="CASCADE"), index=True)
    session_id: Mapped[str] = mapped_column(String(40), index=True)
    split: Mapped[str] = mapped_column(String(8))
    examples: Mapped[int] = mapped_column(Integer, default=0)
    content_sha256: Mapped[str] = mapped_column(String(64))


class HeldOut(Base):
    """A session frozen into a base model's held-out eval set: no later dataset for that model trains on it."""

    __tablename__ = "heldout"
    __table_args__ = (UniqueConstraint("base_model", "session_id", name="uq_heldout_model_session"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    base_model: Mapped[str] = mapped_column(Text, index=True)
    session_id: Mapped[str] = mapped_column(String(40))
    dataset_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    frozen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PendingSession(Base):
    """A session an incremental build of a base model still reads (app/core/datasets/pending): stored below the kept
    watermark and in no used dataset unchanged since; `used` when a used dataset holds it by id (stored again since:
    the build reads it, the school's count does not); `verdict` the filter the last build of `scope` dropped it by."""

    __tablename__ = "pending_sessions"
    model: Mapped[str] = mapped_column(String(40), primary_key=True)  # pending.key: base model and what counts as used
    session_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    stored_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))  # the session's updated_at when it came
    root: Mapped[int] = mapped_column(Integer, default=1)  # a top-level session
    used: Mapped[int] = mapped_column(Integer, default=0)
    scope: Mapped[str | None] = mapped_column(String(16), nullable=True)  # pending.scope of the build that judged it
    verdict: Mapped[str | None] = mapped_column(Text, nullable=True)  # the filter that dropped it; None: read it
