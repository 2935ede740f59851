"""Evaluations, the gate's verdicts and promotions."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.core.base.schema.base import Base, utcnow


class EvalRow(Base):
    """A checkpoint (or the base model: checkpoint_id null) evaluated on a held-out set; the report is on disk."""

    __tablename__ = "evals"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    checkpoint_id: Mapped[int | None] = mapped_column(ForeignKey("checkpoints.id"), nullable=True, index=True)
    base_model: Mapped[str] = mapped_column(Text)
    label: Mapped[str] = mapped_column(Text)
    adapter_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    eval_set: Mapped[str] = mapped_column(Text)
    eval_set_sha256: Mapped[str] = mapped_column(String(64), index=True)
    settings_sha256: Mapped[str] = mapped_column(String(64))
    contexts: Mapped[int] = mapped_column(Integer, default=0)
    examples: Mapped[int] = mapped_column(Integer, default=0)
    metrics_json: Mapped[str] = mapped_column(Text, default="{}")
    report_path: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class VerdictRow(Base):
    """The gate's verdict on a checkpoint (pass | fail | inconclusive) against the base and the deployed model."""

    __tablename__ = "verdicts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoints.id"), index=True)
    eval_id: Mapped[int] = mapped_column(ForeignKey("evals.id"))
    base_eval_id: Mapped[int | None] = mapped_column(ForeignKey("evals.id"), nullable=True)
    deployed_eval_id: Mapped[int | None] = mapped_column(ForeignKey("evals.id"), nullable=True)
    verdict: Mapped[str] = mapped_column(String(20))
    reasons_json: Mapped[str] = mapped_column(Text)
    thresholds_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Promotion(Base):
    """One change of what is deployed for a base model: promote (a passing checkpoint) or rollback (to an earlier
    one, or to the base model: checkpoint_id null). The newest row is what is deployed."""

    __tablename__ = "promotions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    base_model: Mapped[str] = mapped_column(Text, index=True)
    checkpoint_id: Mapped[int | None] = mapped_column(ForeignKey("checkpoints.id"), nullable=True)
    verdict_id: Mapped[int | None] = mapped_column(ForeignKey("verdicts.id"), nullable=True)
    action: Mapped[str] = mapped_column(String(20))  # promote | rollback
    replaces_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    note: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
