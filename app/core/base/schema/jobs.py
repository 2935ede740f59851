"""Training jobs, the engine runs that execute them and the checkpoints they seal."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.core.base.schema.base import Base, utcnow


class Job(Base):
    """A training job (any recipe) in the queue: queued -> running -> completed | failed | stopped (or held,
    cancelled, validated for a dry run)."""

    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20), default="sft")
    state: Mapped[str] = mapped_column(String(20), default="queued", index=True)
    priority: Mapped[str] = mapped_column(String(10), default="normal")  # high | normal | low
    position: Mapped[float] = mapped_column(Float, default=0.0)  # FIFO within a priority; reordering moves it
    config_fingerprint: Mapped[str | None] = mapped_column(String(64), nullable=True)
    source: Mapped[str] = mapped_column(String(20), default="user")  # user | inbox | cli | loop
    dataset_path: Mapped[str] = mapped_column(Text)
    dataset_sha256: Mapped[str] = mapped_column(String(64))
    model_ref: Mapped[str] = mapped_column(Text)
    spec_path: Mapped[str] = mapped_column(Text)
    spec_sha256: Mapped[str] = mapped_column(String(64))
    records: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)
    runs: Mapped[list[Run]] = relationship(back_populates="job", order_by="Run.id")


class Run(Base):
    """One engine process executing a job: where it lives, how to reach it, how it ended."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    run_dir: Mapped[str] = mapped_column(Text)
    socket_path: Mapped[str] = mapped_column(Text)
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    pid_started: Mapped[float | None] = mapped_column(Float, nullable=True)
    resume_step: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the checkpoint it resumed from
    state: Mapped[str] = mapped_column(String(20), default="starting")
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    result_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    job: Mapped[Job] = relationship(back_populates="runs")
    checkpoints: Mapped[list[CheckpointRow]] = relationship(back_populates="run", order_by="CheckpointRow.id")


class CheckpointRow(Base):
    """A saved checkpoint or final adapter of a run, registered only after the run's result validated."""

    __tablename__ = "checkpoints"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))  # checkpoint | adapter
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    run: Mapped[Run] = relationship(back_populates="checkpoints")
