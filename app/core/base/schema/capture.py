"""Captured transcripts: watched files, sessions and their messages, imports, quarantined lines, dropped dataset files."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Float, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.core.base.schema.base import Base, utcnow


class CaptureFile(Base):
    """A transcript file being followed: how far it has been read (byte offset) and its cumulative counts."""

    __tablename__ = "capture_files"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    path: Mapped[str] = mapped_column(Text, unique=True)  # the resolved path (never stored in scrubbed form)
    agent: Mapped[str] = mapped_column(String(20))
    session_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    offset: Mapped[int] = mapped_column(Integer, default=0)
    size: Mapped[int] = mapped_column(Integer, default=0)
    mtime: Mapped[float] = mapped_column(Float, default=0.0)
    lines: Mapped[int] = mapped_column(Integer, default=0)
    stored: Mapped[int] = mapped_column(Integer, default=0)
    quarantined: Mapped[int] = mapped_column(Integer, default=0)
    skipped: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class AgentSession(Base):
    """One captured agent session (scrubbed), with its behavioural signals."""

    __tablename__ = "sessions"
    __table_args__ = (Index("ix_sessions_root_started", "parent_id", "started_at"),)  # the newest top-level ones
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    agent: Mapped[str] = mapped_column(String(20), index=True)
    native_id: Mapped[str] = mapped_column(Text, index=True)  # the agent's own session id (a copy elsewhere: the same)
    parent_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    spawned_by: Mapped[str | None] = mapped_column(Text, nullable=True)
    source_path: Mapped[str] = mapped_column(Text)
    project: Mapped[str | None] = mapped_column(Text, nullable=True, index=True)
    cwd: Mapped[str | None] = mapped_column(Text, nullable=True)
    git_branch: Mapped[str | None] = mapped_column(Text, nullable=True)
    agent_version: Mapped[str | None] = mapped_column(String(40), nullable=True)
    model: Mapped[str | None] = mapped_column(Text, nullable=True)
    models: Mapped[str | None] = mapped_column(Text, nullable=True)  # the acting models, comma separated (0017)
    actor: Mapped[str] = mapped_column(String(10), server_default="teacher", index=True)  # teacher | student | mixed
    started_at: Mapped[str | None] = mapped_column(String(40), nullable=True)
    ended_at: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    day: Mapped[str | None] = mapped_column(String(10), nullable=True, index=True)
    messages: Mapped[int] = mapped_column(Integer, default=0)
    turns: Mapped[int] = mapped_column(Integer, default=0)
    tool_calls: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    compactions: Mapped[int] = mapped_column(Integer, default=0)
    abandoned_branches: Mapped[int] = mapped_column(Integer, default=0)
    outcome: Mapped[str] = mapped_column(String(20), default="finished", index=True)
    exploration: Mapped[str] = mapped_column(String(20), default="minimal")
    signals_json: Mapped[str] = mapped_column(Text, default="{}")
    secrets_scrubbed: Mapped[int] = mapped_column(Integer, default=0)
    title: Mapped[str] = mapped_column(Text, default="")
    member: Mapped[str | None] = mapped_column(String(80), nullable=True, index=True)  # team mode: who shipped it
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow,
                                                 index=True)


class SessionCount(Base):
    """What one session adds to the Capture tab's counts (capture_counts, tool_counts), as they were when counted:
    app/core/capture/derived subtracts it when the session is stored again or goes, so the counts follow by deltas.
    No foreign key: a deleted session's row must outlive it until its share is taken back."""

    __tablename__ = "session_counts"
    session_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    root: Mapped[bool] = mapped_column(Integer, default=1)  # a top-level session (parent_id null)
    day: Mapped[str | None] = mapped_column(String(10), nullable=True)
    agent: Mapped[str] = mapped_column(String(20))
    project: Mapped[str | None] = mapped_column(Text, nullable=True)
    messages: Mapped[int] = mapped_column(Integer, default=0)  # sessions.messages (its main branch)
    message_rows: Mapped[int] = mapped_column(Integer, default=0)  # its rows in messages, every branch
    tools_json: Mapped[str] = mapped_column(Text, default="{}")  # tool name -> calls (signals' tool_counts)


class CaptureCount(Base):
    """Sessions, messages and message rows per (day, agent, project, top-level or not): the Capture tab's totals,
    per-day chart and projects as sums over a few rows per day, kept by deltas (see SessionCount)."""

    __tablename__ = "capture_counts"
    __table_args__ = (Index("ix_capture_counts_key", "day", "agent", "project", "root"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    root: Mapped[bool] = mapped_column(Integer, default=1)
    day: Mapped[str | None] = mapped_column(String(10), nullable=True)
    agent: Mapped[str] = mapped_column(String(20))
    project: Mapped[str | None] = mapped_column(Text, nullable=True)
    sessions: Mapped[int] = mapped_column(Integer, default=0)
    messages: Mapped[int] = mapped_column(Integer, default=0)
    message_rows: Mapped[int] = mapped_column(Integer, default=0)


class ToolCount(Base):
    """Tool calls by name over every session (main branches): the Capture tab's histogram, kept by deltas."""

    __tablename__ = "tool_counts"
    tool: Mapped[str] = mapped_column(String(200), primary_key=True)
    calls: Mapped[int] = mapped_column(Integer, default=0)


class MessageRow(Base):
    """One message of a session: branch 0 reached the end, 1.. are abandoned rewind branches."""

    __tablename__ = "messages"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"), index=True)
    branch: Mapped[int] = mapped_column(Integer, default=0)
    seq: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(12))
    text: Mapped[str] = mapped_column(Text, default="")
    parts_json: Mapped[str] = mapped_column(Text, default="[]")  # "" where parts_z holds them (capture/rows)
    parts_z: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)  # parts JSON, compressed (capture/rows)
    tools: Mapped[str] = mapped_column(Text, default="")  # tool names called, comma separated
    is_error: Mapped[bool] = mapped_column(Integer, default=0)
    timestamp: Mapped[str | None] = mapped_column(String(40), nullable=True)
    model: Mapped[str | None] = mapped_column(Text, nullable=True)
    compact_summary: Mapped[bool] = mapped_column(Integer, default=0)
    meta: Mapped[bool] = mapped_column(Integer, default=0)
    line: Mapped[int | None] = mapped_column(Integer, nullable=True)


class ImportRow(Base):
    """One ingest of a file (or of its new lines): lines in = stored + quarantined + skipped."""

    __tablename__ = "imports"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    origin: Mapped[str] = mapped_column(String(20))  # watch | scan | import | hook | drop
    kind: Mapped[str] = mapped_column(String(20))  # transcript | dataset
    agent: Mapped[str | None] = mapped_column(String(20), nullable=True)
    path: Mapped[str] = mapped_column(Text)  # scrubbed for display
    lines_in: Mapped[int] = mapped_column(Integer, default=0)
    stored: Mapped[int] = mapped_column(Integer, default=0)
    quarantined: Mapped[int] = mapped_column(Integer, default=0)
    skipped: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(20), default="ok")  # ok | refused | error
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)


class QuarantineRow(Base):
    """A line or file that could not be used, kept (scrubbed) with where it came from and why."""

    __tablename__ = "quarantine"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    import_id: Mapped[int] = mapped_column(ForeignKey("imports.id"), index=True)
    source_path: Mapped[str] = mapped_column(Text)
    line: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str] = mapped_column(Text)
    excerpt: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class DatasetFile(Base):
    """A dataset file a user dropped: its detected spec and QUICK-check counts."""

    __tablename__ = "datasets"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64), index=True)
    spec: Mapped[str | None] = mapped_column(String(40), nullable=True)
    accepted: Mapped[bool] = mapped_column(Integer, default=0)
    reason: Mapped[str] = mapped_column(Text, default="")
    records: Mapped[int] = mapped_column(Integer, default=0)
    problems: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
