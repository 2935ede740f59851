"""Tables derived from stored sessions, kept current for the sessions stored since the last look (a watermark on
`sessions.updated_at`, kept in settings), so a read over every session costs what is new: the Capture tab's counts
and tool histogram here (by deltas), the contradiction scan's request keys in app/core/experience/contradictions."""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

from sqlalchemy import and_, delete, exists, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from app.core.base import settings
from app.core.base.schema import AgentSession, CaptureCount, MessageRow, SessionCount, Setting, ToolCount
from app.core.base.store import Store

BATCH = 500
COUNTS = "capture.counts_indexed"  # settings key: the newest session time session_counts has seen
TOTALS = "capture.counted_totals"  # settings key: [top-level, sub-agent] sessions in capture_counts, kept with it
KEY = (CaptureCount.root, CaptureCount.day, CaptureCount.agent, CaptureCount.project)


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def catch_up(store: Store, key: str, refresh: Callable[[object, list[str]], None]) -> int:
    """Call `refresh(db, session_ids)` (in batches, each in its own transaction) for every session stored since the
    watermark `key` (all of them the first time), then move the watermark; returns how many sessions it saw. A
    session stored at the watermark's instant is seen again: refresh must replace, not add."""
    since = settings.get(store, key)
    with store.session() as db:
        q = select(AgentSession.id, AgentSession.updated_at)
        fresh = db.execute(q.where(AgentSession.updated_at >= _utc(datetime.fromisoformat(since))) if since else q).all()
    _in_batches(store, [sid for sid, _ in fresh], refresh)
    if fresh:
        settings.put(store, key, max(_utc(at) for _, at in fresh).isoformat())
    return len(fresh)


def _in_batches(store: Store, ids: list[str], refresh: Callable[[object, list[str]], None]) -> None:
    for start in range(0, len(ids), BATCH):
        with store.session() as db:
            refresh(db, ids[start:start + BATCH])


def counted(store: Store) -> None:
    """Bring the Capture tab's counts up to date: the sessions stored since the last look counted (again), those
    gone since taken back. A reader beside this one (another process) may count the same sessions at once: its
    transaction fails on the ledger's key and is done again over what that one committed."""
    try:
        catch_up(store, COUNTS, _count)
    except IntegrityError:
        catch_up(store, COUNTS, _count)
    _reconcile(store)


def _count(db, ids: list[str]) -> None:
    """Take back what these sessions added when last counted and count them as they are now (replace, not add).
    The ledger's delete comes first: SQLite's one writer is taken before anything is read."""
    cols = (SessionCount.root, SessionCount.day, SessionCount.agent, SessionCount.project, SessionCount.messages,
            SessionCount.message_rows, SessionCount.tools_json)
    old = [dict(r._mapping) for r in db.execute(delete(SessionCount).where(SessionCount.session_id.in_(ids))
                                                .returning(*cols))]
    rows = db.execute(select(AgentSession.id, AgentSession.parent_id, AgentSession.day, AgentSession.agent,
                             AgentSession.project, AgentSession.messages, AgentSession.signals_json)
                      .where(AgentSession.id.in_(ids))).all()
    message_rows = dict(db.execute(select(MessageRow.session_id, func.count()).where(MessageRow.session_id.in_(ids))
                                   .group_by(MessageRow.session_id)).all())
    new = [dict(session_id=r.id, root=int(r.parent_id is None), day=r.day, agent=r.agent, project=r.project,
                messages=r.messages or 0, message_rows=message_rows.get(r.id, 0),
                tools_json=json.dumps(dict(_tool_counts(r.signals_json)))) for r in rows]
    if new:
        db.execute(insert(SessionCount), new)
    _apply(db, [(r, -1) for r in old] + [(r, 1) for r in new])


def stored(store: Store) -> tuple[int, int]:
    """(top-level sessions, sub-agent sessions) stored, brought up to date first: two kept numbers, whatever the
    number of sessions or of days they were stored on."""
    counted(store)
    with store.session() as db:
        return _totals(db)


def _totals(db) -> tuple[int, int]:
    """The kept totals; summed from capture_counts where none are kept yet (a store no look has counted since)."""
    row = db.get(Setting, TOTALS)
    return tuple(json.loads(row.value)) if row else _summed(db)


def _summed(db) -> tuple[int, int]:
    sums = select(CaptureCount.root, func.sum(CaptureCount.sessions)).group_by(CaptureCount.root)
    rows = dict(db.execute(sums).all())
    return int(rows.get(1) or 0), int(rows.get(0) or 0)


def _keep_totals(db, shift: tuple[int, int] | None) -> None:
    """Move the kept totals by shift in the ledger's transaction (the row locked first on PostgreSQL: a reader beside
    this one waits, it does not lose an update); None, or none kept yet: summed again from capture_counts."""
    row = db.execute(select(Setting).where(Setting.key == TOTALS).with_for_update()).scalar_one_or_none()
    if row is not None and shift is not None:
        roots, subs = json.loads(row.value)
        row.value = json.dumps([roots + shift[0], subs + shift[1]])
    elif row is not None:
        row.value = json.dumps(_summed(db))
    else:
        db.add(Setting(key=TOTALS, value=json.dumps(_summed(db))))


def _apply(db, shares: Iterable[tuple[Mapping, int]]) -> None:
    """Add (+1) or take back (-1) each ledger row's share of capture_counts and tool_counts (and of the totals)."""
    keys: dict[tuple, list[int]] = {}
    tools: Counter = Counter()
    for row, sign in shares:
        d = keys.setdefault((row["root"], row["day"], row["agent"], row["project"]), [0, 0, 0])
        d[0] += sign
        d[1] += sign * row["messages"]
        d[2] += sign * row["message_rows"]
        for tool, n in json.loads(row["tools_json"] or "{}").items():
            tools[tool] += sign * n
    for key, (n, m, r) in keys.items():
        if not (n or m or r):
            continue
        where = and_(*(col.is_(None) if value is None else col == value for col, value in zip(KEY, key)))
        if not db.execute(update(CaptureCount).where(where).values(
                sessions=CaptureCount.sessions + n, messages=CaptureCount.messages + m,
                message_rows=CaptureCount.message_rows + r)).rowcount:
            db.execute(insert(CaptureCount).values(**dict(zip(("root", "day", "agent", "project"), key)), sessions=n,
                                                   messages=m, message_rows=r))
        if n < 0:
            db.execute(delete(CaptureCount).where(where, CaptureCount.sessions <= 0))
    shift = (sum(d[0] for key, d in keys.items() if key[0]), sum(d[0] for key, d in keys.items() if not key[0]))
    if any(shift) or db.get(Setting, TOTALS) is None:
        _keep_totals(db, shift)
    for tool, n in tools.items():
        if not n:
            continue
        if not db.execute(update(ToolCount).where(ToolCount.tool == tool).values(calls=ToolCount.calls + n)).rowcount:
            db.execute(insert(ToolCount).values(tool=tool, calls=n))
        if n < 0:
            db.execute(delete(ToolCount).where(ToolCount.tool == tool, ToolCount.calls <= 0))


def _reconcile(store: Store) -> None:
    """Sessions deleted (a withdrawal, a sub-agent a session stored again no longer has) or stored without passing
    the watermark: noticed by the count (one index scan), put right by one pass over the ledger (rare)."""
    with store.session() as db:
        if sum(_totals(db)) == db.scalar(select(func.count()).select_from(AgentSession)):
            return
        gone = db.scalars(select(SessionCount.session_id).where(
            ~exists().where(AgentSession.id == SessionCount.session_id))).all()
        missed = db.scalars(select(AgentSession.id).where(
            ~exists().where(SessionCount.session_id == AgentSession.id))).all()
    _in_batches(store, [*gone, *missed], _count)
    with store.session() as db:  # the totals from the rows again: what put the count off may have put them off too
        _keep_totals(db, None)


def _tool_counts(raw: str | None) -> Iterable[tuple[str, int]]:
    try:
        counts: Counter = Counter()
        for tool, n in (json.loads(raw or "{}").get("tool_counts") or {}).items():
            counts[tool[:200]] += int(n)
        return counts.items()
    except (ValueError, TypeError, AttributeError):
        return ()


def tool_histogram(store: Store, limit: int = 20) -> list[tuple[str, int]]:
    """Tool calls by name over every session (main branches), most used first."""
    counted(store)
    with store.session() as db:
        return [(tool, int(n)) for tool, n in db.execute(select(ToolCount.tool, ToolCount.calls).where(
            ToolCount.calls > 0).order_by(ToolCount.calls.desc(), ToolCount.tool).limit(limit))]
