"""Tables derived from stored sessions, kept current for the sessions stored since the last look (a watermark on
`sessions.updated_at`, kept in settings), so a read over every session costs what is new: the tool counts behind the
Capture tab's histogram here, the contradiction scan's request keys in app/core/experience/contradictions."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from sqlalchemy import delete, func, insert, select

from app.core.base import settings
from app.core.base.schema import AgentSession, SessionTool
from app.core.base.store import Store

BATCH = 500
TOOLS = "capture.tools_indexed"  # settings key: the newest session time session_tools has seen


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
    for start in range(0, len(fresh), BATCH):
        with store.session() as db:
            refresh(db, [sid for sid, _ in fresh[start:start + BATCH]])
            db.commit()
    if fresh:
        settings.put(store, key, max(_utc(at) for _, at in fresh).isoformat())
    return len(fresh)


def _tools(db, ids: list[str]) -> None:
    rows = db.execute(select(AgentSession.id, AgentSession.signals_json).where(AgentSession.id.in_(ids))).all()
    db.execute(delete(SessionTool).where(SessionTool.session_id.in_(ids)))
    counts = [dict(session_id=sid, tool=tool[:200], calls=int(n))
              for sid, raw in rows for tool, n in _tool_counts(raw)]
    if counts:
        db.execute(insert(SessionTool), counts)


def _tool_counts(raw: str | None) -> Iterable[tuple[str, int]]:
    try:
        return (json.loads(raw or "{}").get("tool_counts") or {}).items()
    except (ValueError, AttributeError):
        return ()


def tool_histogram(store: Store, limit: int = 20) -> list[tuple[str, int]]:
    """Tool calls by name over every session (main branches), most used first."""
    catch_up(store, TOOLS, _tools)
    with store.session() as db:
        total = func.sum(SessionTool.calls)
        return [(tool, int(n)) for tool, n in db.execute(select(SessionTool.tool, total).group_by(SessionTool.tool)
                                                         .order_by(total.desc(), SessionTool.tool).limit(limit))]
