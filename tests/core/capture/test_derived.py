"""Derived tables keep up with what was stored since they last looked: the tool histogram from session_tools equals
the sum over every session's signals, after new sessions and after a session is stored again (no double count)."""
from __future__ import annotations

import json
from collections import Counter

from sqlalchemy import delete, insert, select

from app.core.base.schema import AgentSession
from app.core.capture import derived
from bench.synthetic_sessions import populate


def _truth(store) -> Counter:
    with store.session() as db:
        return sum((Counter(json.loads(raw).get("tool_counts", {})) for raw in
                    db.scalars(select(AgentSession.signals_json))), Counter())


def test_the_histogram_follows_new_and_restored_sessions_exactly(store):
    populate(store, 40)
    assert dict(derived.tool_histogram(store, 100)) == dict(_truth(store))
    assert derived.catch_up(store, derived.TOOLS, lambda db, ids: None) <= 1  # nothing new: at most the newest again
    populate(store, 10, start_index=40)  # new sessions
    with store.session() as db:  # one stored again, as ingest does: deleted and inserted with other counts
        row = db.scalars(select(AgentSession).where(AgentSession.parent_id.is_(None)).limit(1)).one()
        values = {c.name: getattr(row, c.key) for c in AgentSession.__table__.columns if c.name != "updated_at"}
    values["signals_json"] = json.dumps({"tool_counts": {"Grep": 7}})
    with store.engine.begin() as conn:
        conn.execute(delete(AgentSession).where(AgentSession.id == values["id"]))
        conn.execute(insert(AgentSession).values(**values))
    assert dict(derived.tool_histogram(store, 100)) == dict(_truth(store))
