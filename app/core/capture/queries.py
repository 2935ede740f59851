"""Read-side of capture for the GUI and the CLI: totals, sessions per day per agent, projects, tools, quarantine."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from sqlalchemy import func, select

from app.core.base.schema import AgentSession, CaptureCount, CaptureFile, ImportRow, MessageRow, QuarantineRow
from app.core.base.store import Store
from app.core.capture import actors, derived
from app.core.capture.rows import parts_of
from app.core.capture.session import Part


@dataclass
class Totals:
    sessions: int = 0
    messages: int = 0
    files: int = 0
    quarantined: int = 0
    by_agent: dict[str, int] = field(default_factory=dict)
    lines_in: int = 0
    stored: int = 0
    quarantined_lines: int = 0  # lines (quarantined counts entries, whole refused files included)
    skipped: int = 0
    by_actor: dict[str, int] = field(default_factory=dict)  # top-level sessions by who acted: teacher, student, mixed


@dataclass
class SessionSummary:
    id: str
    agent: str
    project: str | None
    title: str
    started_at: str | None
    messages: int
    tool_calls: int
    errors: int
    outcome: str
    model: str | None
    subagents: int = 0
    actor: str = "teacher"  # who acted (capture/actors): teacher | student | mixed


@dataclass
class TranscriptMessage:
    branch: int
    seq: int
    role: str
    timestamp: str | None
    parts: list[Part]
    compact_summary: bool
    meta: bool


@dataclass
class QuarantineItem:
    source_path: str
    line: int | None
    reason: str
    excerpt: str
    created_at: str


class CaptureQueries:
    """Every query is one short read transaction (safe beside the watcher's writes: WAL)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def totals(self) -> Totals:
        """Counts kept by deltas (derived.counted): what it costs follows what was stored since the last look."""
        derived.counted(self.store)
        by_actor = actors.counts(self.store, actors.current(self.store))
        with self.store.session() as db:
            by_agent = dict(db.execute(select(CaptureCount.agent, func.sum(CaptureCount.sessions)).where(
                CaptureCount.root == 1).group_by(CaptureCount.agent)).all())
            counts = db.execute(select(func.coalesce(func.sum(ImportRow.lines_in), 0),
                                       func.coalesce(func.sum(ImportRow.stored), 0),
                                       func.coalesce(func.sum(ImportRow.quarantined), 0),
                                       func.coalesce(func.sum(ImportRow.skipped), 0))).one()
            return Totals(sessions=sum(by_agent.values()), by_agent=by_agent,
                          messages=db.scalar(select(func.coalesce(func.sum(CaptureCount.message_rows), 0))),
                          files=db.scalar(select(func.count()).select_from(CaptureFile)) or 0,
                          quarantined=db.scalar(select(func.count()).select_from(QuarantineRow)) or 0,
                          lines_in=counts[0], stored=counts[1], quarantined_lines=counts[2], skipped=counts[3],
                          by_actor=by_actor)

    def sessions_per_day(self, days: int | None = None) -> dict[str, dict[str, int]]:
        """{day: {agent: sessions}} for top-level sessions, days in order (`days`: the newest that many only)."""
        derived.counted(self.store)
        with self.store.session() as db:
            query = select(CaptureCount.day, CaptureCount.agent, func.sum(CaptureCount.sessions)).where(
                CaptureCount.root == 1, CaptureCount.day.is_not(None))
            if days:
                first = db.scalar(select(func.min(select(CaptureCount.day).where(CaptureCount.root == 1,
                                                                                 CaptureCount.day.is_not(None))
                                                  .distinct().order_by(CaptureCount.day.desc()).limit(days)
                                                  .subquery().c.day)))
                query = query.where(CaptureCount.day >= first) if first else query
            rows = db.execute(query.group_by(CaptureCount.day, CaptureCount.agent).order_by(CaptureCount.day)).all()
        out: dict[str, dict[str, int]] = {}
        for day, agent, n in rows:
            if n:
                out.setdefault(day, {})[agent] = int(n)
        return out

    def projects(self) -> list[tuple[str, int, int]]:
        """(project, sessions, messages), most sessions first."""
        derived.counted(self.store)
        with self.store.session() as db:
            n = func.sum(CaptureCount.sessions)
            rows = db.execute(select(func.coalesce(CaptureCount.project, "(none)"), n, func.sum(CaptureCount.messages))
                              .where(CaptureCount.root == 1).group_by(CaptureCount.project)
                              .order_by(n.desc())).all()
        return [(p, int(n), int(m or 0)) for p, n, m in rows if n]

    def sessions_stored(self) -> tuple[int, int]:
        """(top-level sessions, sub-agent sessions) stored: the Datasets tab's count to build from."""
        return derived.stored(self.store)

    def tool_histogram(self, limit: int = 20) -> list[tuple[str, int]]:
        """Tool calls by name over every session (main branches), most used first (derived.tool_histogram)."""
        return derived.tool_histogram(self.store, limit)

    def recent_sessions(self, limit: int = 200, agent: str | None = None,
                        project: str | None = None) -> list[SessionSummary]:
        with self.store.session() as db:
            query = select(AgentSession).where(AgentSession.parent_id.is_(None))
            query = query.where(AgentSession.agent == agent) if agent else query
            query = query.where(AgentSession.project == project) if project else query
            rows = db.scalars(query.order_by(AgentSession.started_at.desc()).limit(limit)).all()
            subs = dict(db.execute(select(AgentSession.parent_id, func.count()).where(
                AgentSession.parent_id.in_([r.id for r in rows])).group_by(AgentSession.parent_id)).all())
        return [SessionSummary(r.id, r.agent, r.project, r.title, r.started_at, r.messages, r.tool_calls, r.errors,
                               r.outcome, r.model, subs.get(r.id, 0), r.actor) for r in rows]

    def signals(self, session_id: str) -> dict:
        with self.store.session() as db:
            raw = db.scalar(select(AgentSession.signals_json).where(AgentSession.id == session_id))
        return json.loads(raw or "{}")

    def subagents(self, session_id: str) -> list[SessionSummary]:
        with self.store.session() as db:
            rows = db.scalars(select(AgentSession).where(AgentSession.parent_id == session_id)).all()
        return [SessionSummary(r.id, r.agent, r.project, r.title, r.started_at, r.messages, r.tool_calls, r.errors,
                               r.outcome, r.model, actor=r.actor) for r in rows]

    def transcript(self, session_id: str, branch: int | None = 0) -> list[TranscriptMessage]:
        """A session's messages (branch 0: the one that reached the end; None: every branch)."""
        with self.store.session() as db:
            query = select(MessageRow).where(MessageRow.session_id == session_id)
            query = query.where(MessageRow.branch == branch) if branch is not None else query
            rows = db.scalars(query.order_by(MessageRow.branch, MessageRow.seq)).all()
        return [TranscriptMessage(r.branch, r.seq, r.role, r.timestamp, parts_of(r),
                                  bool(r.compact_summary), bool(r.meta)) for r in rows]

    def quarantine(self, limit: int = 500) -> list[QuarantineItem]:
        with self.store.session() as db:
            rows = db.scalars(select(QuarantineRow).order_by(QuarantineRow.id.desc()).limit(limit)).all()
        return [QuarantineItem(r.source_path, r.line, r.reason, r.excerpt, r.created_at.isoformat()) for r in rows]
