"""Derived counts keep up with what was stored since they last looked: the Capture tab's totals, per-day chart,
projects and tool histogram (kept by deltas) equal the same sums over every stored session, after new sessions,
after a session is stored again (no double count) and after sessions are deleted (taken back)."""
from __future__ import annotations

import json
from collections import Counter

from sqlalchemy import delete, func, insert, select

from app.core.base.schema import AgentSession, MessageRow, SessionCount
from app.core.capture import derived
from app.core.capture.queries import CaptureQueries
from bench.synthetic_sessions import populate


def _truth(store) -> dict:
    """What the Capture tab shows, summed over every stored session and message the slow way."""
    with store.session() as db:
        roots = db.execute(select(AgentSession).where(AgentSession.parent_id.is_(None))).scalars().all()
        tools = sum((Counter(json.loads(raw).get("tool_counts", {})) for raw in
                     db.scalars(select(AgentSession.signals_json))), Counter())
        rows = db.scalar(select(func.count()).select_from(MessageRow))
        per_day: dict = {}
        projects: Counter = Counter()
        for r in roots:
            if r.day:
                per_day.setdefault(r.day, Counter())[r.agent] += 1
            projects[r.project or "(none)"] += r.messages
        return dict(sessions=len(roots), messages=rows, tools=dict(tools), projects=dict(projects),
                    per_day={d: dict(c) for d, c in per_day.items()})


def _shown(store) -> dict:
    q = CaptureQueries(store)
    t = q.totals()
    return dict(sessions=t.sessions, messages=t.messages, tools=dict(q.tool_histogram(1000)),
                projects={p: m for p, _, m in q.projects()}, per_day=q.sessions_per_day())


def _store_again(store, sid: str, **changed) -> None:
    """As ingest stores a grown session: deleted (its sub-agents too) and inserted again with other values."""
    with store.session() as db:
        row = db.scalars(select(AgentSession).where(AgentSession.id == sid)).one()
        values = {c.name: getattr(row, c.key) for c in AgentSession.__table__.columns if c.name != "updated_at"}
    with store.engine.begin() as conn:
        conn.execute(delete(AgentSession).where((AgentSession.id == sid) | (AgentSession.parent_id == sid)))
        conn.execute(insert(AgentSession).values(**{**values, **changed}))


def test_the_counts_follow_new_restored_and_deleted_sessions_exactly(store):
    populate(store, 40)
    assert _shown(store) == _truth(store)
    assert derived.catch_up(store, derived.COUNTS, lambda db, ids: None) <= 1  # nothing new: at most the newest again
    populate(store, 10, start_index=40)  # new sessions
    with store.session() as db:
        parent = db.scalar(select(AgentSession.parent_id).where(AgentSession.parent_id.is_not(None)).limit(1))
        other = db.scalar(select(AgentSession.id).where(AgentSession.parent_id.is_(None), AgentSession.id != parent)
                          .limit(1))
    _store_again(store, parent, signals_json=json.dumps({"tool_counts": {"Grep": 7}}), day="2031-01-01")  # its sub-agent goes
    _store_again(store, other, project="elsewhere", messages=3)
    assert _shown(store) == _truth(store)
    with store.engine.begin() as conn:  # a withdrawal: sessions and their messages deleted
        gone = [r[0] for r in conn.execute(select(AgentSession.id).where(AgentSession.parent_id.is_(None)).limit(5))]
        conn.execute(delete(MessageRow).where(MessageRow.session_id.in_(gone)))
        conn.execute(delete(AgentSession).where(AgentSession.id.in_(gone) | AgentSession.parent_id.in_(gone)))
    assert _shown(store) == _truth(store)
    with store.session() as db:  # the ledger holds the stored sessions, no more
        assert db.scalar(select(func.count()).select_from(SessionCount)) == db.scalar(
            select(func.count()).select_from(AgentSession))


def test_the_per_day_chart_reads_the_newest_days_only(store):
    populate(store, 30)
    every = CaptureQueries(store).sessions_per_day()
    newest = CaptureQueries(store).sessions_per_day(days=2)
    assert len(every) > 2 and newest == {d: every[d] for d in sorted(every)[-2:]}
