"""ORM tables (SQLAlchemy 2.x). Alembic migrations under migrations/ are the source of truth for the schema."""
from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


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


class Setting(Base):
    """An app setting (queue paused, concurrent jobs …) as JSON text."""

    __tablename__ = "settings"
    key: Mapped[str] = mapped_column(String(60), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class CaptureFile(Base):
    """A transcript file being followed: how far it has been read (byte offset) and its cumulative counts."""

    __tablename__ = "capture_files"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    path: Mapped[str] = mapped_column(Text, unique=True)  # the real path (never stored in scrubbed form)
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
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    agent: Mapped[str] = mapped_column(String(20), index=True)
    native_id: Mapped[str] = mapped_column(Text)
    parent_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    spawned_by: Mapped[str | None] = mapped_column(Text, nullable=True)
    source_path: Mapped[str] = mapped_column(Text)
    project: Mapped[str | None] = mapped_column(Text, nullable=True, index=True)
    cwd: Mapped[str | None] = mapped_column(Text, nullable=True)
    git_branch: Mapped[str | None] = mapped_column(Text, nullable=True)
    agent_version: Mapped[str | None] = mapped_column(String(40), nullable=True)
    model: Mapped[str | None] = mapped_column(Text, nullable=True)
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
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class MessageRow(Base):
    """One message of a session: branch 0 reached the end, 1.. are abandoned rewind branches."""

    __tablename__ = "messages"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"), index=True)
    branch: Mapped[int] = mapped_column(Integer, default=0)
    seq: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(12))
    text: Mapped[str] = mapped_column(Text, default="")
    parts_json: Mapped[str] = mapped_column(Text, default="[]")
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


class ExportRow(Base):
    """A GGUF export of a checkpoint (or of the base model: checkpoint_id null): its folder, files with their smoke
    tests (files_json), the LoRA GGUF, and the embedded template's hash, stop strings and tokens (meta_json)."""

    __tablename__ = "exports"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    checkpoint_id: Mapped[int | None] = mapped_column(ForeignKey("checkpoints.id"), nullable=True, index=True)
    base_model: Mapped[str] = mapped_column(Text)
    label: Mapped[str] = mapped_column(Text)
    key: Mapped[str] = mapped_column(String(64), index=True)
    path: Mapped[str] = mapped_column(Text)
    files_json: Mapped[str] = mapped_column(Text, default="[]")
    lora_file: Mapped[str | None] = mapped_column(Text, nullable=True)
    template_sha256: Mapped[str] = mapped_column(String(64), default="")
    meta_json: Mapped[str] = mapped_column(Text, default="{}")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Deployment(Base):
    """One change of what the built-in server serves: deploy (an export's file) or rollback (to the file the current
    deployment replaced). The newest row is what serves."""

    __tablename__ = "deployments"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    export_id: Mapped[int] = mapped_column(ForeignKey("exports.id"))
    file: Mapped[str] = mapped_column(Text)
    quant: Mapped[str] = mapped_column(String(20))
    sha256: Mapped[str] = mapped_column(String(64))
    checkpoint_id: Mapped[int | None] = mapped_column(ForeignKey("checkpoints.id"), nullable=True)
    base_model: Mapped[str] = mapped_column(Text)
    action: Mapped[str] = mapped_column(String(20))  # deploy | rollback
    replaces_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    note: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


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
