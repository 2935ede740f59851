"""The Datasets tab's count of stored sessions (derived.stored: two totals kept with the Capture tab's ledger) equals
a full recount after every step of a seeded walk: sessions new, stored again (a sub-agent dropped), deleted, marked,
the kept totals lost or put off; on SQLite and PostgreSQL."""
from __future__ import annotations

import random

import pytest
from sqlalchemy import delete, func, insert, select

from app.core.base import settings
from app.core.base.schema import AgentSession, SessionMark, Setting
from app.core.capture import derived
from app.core.capture.queries import CaptureQueries
from bench.synthetic_sessions import populate
from tests.pg import any_store  # noqa: F401 - fixture


def _recount(store) -> tuple[int, int]:
    with store.session() as db:
        roots = db.scalar(select(func.count()).select_from(AgentSession).where(AgentSession.parent_id.is_(None)))
        return roots, db.scalar(select(func.count()).select_from(AgentSession)) - roots


def _ids(store, roots: bool) -> list[str]:
    with store.session() as db:
        where = AgentSession.parent_id.is_(None) if roots else AgentSession.parent_id.is_not(None)
        return sorted(db.scalars(select(AgentSession.id).where(where)))


def _store_again(store, sid: str, keep_subagents: bool) -> None:
    """As ingest stores a grown session: deleted with its sub-agents, inserted again (with them, or without)."""
    with store.session() as db:
        rows = db.scalars(select(AgentSession).where((AgentSession.id == sid) | (AgentSession.parent_id == sid))).all()
        values = [{c.name: getattr(r, c.key) for c in AgentSession.__table__.columns if c.name != "updated_at"}
                  for r in rows]
    with store.engine.begin() as conn:
        conn.execute(delete(AgentSession).where((AgentSession.id == sid) | (AgentSession.parent_id == sid)))
        conn.execute(insert(AgentSession), [v for v in values if keep_subagents or v["parent_id"] is None])


def _step(store, rng: random.Random, grown: list[int]) -> str:
    kind = rng.choice(["new", "again", "again, sub-agent dropped", "delete root", "delete sub-agent", "mark",
                       "totals lost", "totals off"])
    roots, subs = _ids(store, True), _ids(store, False)
    if kind == "new" or not roots:
        n = rng.randint(1, 8)
        populate(store, n, seed=3, start_index=grown[0])
        grown[0] += n
        return "new"
    if kind.startswith("again"):
        _store_again(store, rng.choice(roots), keep_subagents=kind == "again")
    elif kind == "delete root":
        with store.engine.begin() as conn:
            sid = rng.choice(roots)
            conn.execute(delete(AgentSession).where((AgentSession.id == sid) | (AgentSession.parent_id == sid)))
    elif kind == "delete sub-agent" and subs:
        with store.engine.begin() as conn:
            conn.execute(delete(AgentSession).where(AgentSession.id == rng.choice(subs)))
    elif kind == "mark":
        with store.engine.begin() as conn:
            sid = rng.choice(roots)
            conn.execute(delete(SessionMark).where(SessionMark.session_id == sid))
            conn.execute(insert(SessionMark).values(session_id=sid, weight=rng.choice([0.0, 2.0])))
    elif kind == "totals lost":
        with store.engine.begin() as conn:
            conn.execute(delete(Setting).where(Setting.key == derived.TOTALS))
    elif kind == "totals off":  # a value that does not add up (hand-edited): noticed by the count, summed again
        roots_now, subs_now = _recount(store)
        settings.put(store, derived.TOTALS, [roots_now + rng.randint(1, 3), subs_now])
    return kind


def walk(store, seed: int, steps: int) -> set[str]:
    rng, grown, seen = random.Random(seed), [0], set()
    populate(store, 12, seed=seed)
    grown[0] = 12
    for i in range(steps):
        kind = _step(store, rng, grown)
        seen.add(kind)
        want = _recount(store)
        assert derived.stored(store) == want, (seed, i, kind)
        assert CaptureQueries(store).sessions_stored() == want
        assert tuple(settings.get(store, derived.TOTALS, want)) == want  # kept (none yet: nothing counted since)
    return seen


@pytest.mark.parametrize("seed", [1, 2026])
def test_the_kept_totals_equal_a_full_recount(store, seed):
    assert len(walk(store, seed, 40)) >= 7


@pytest.mark.parametrize("any_store", ["postgresql"], indirect=True)
def test_the_kept_totals_on_postgresql(any_store):
    walk(any_store, 7, 14)


def test_a_store_counted_before_the_totals_were_kept_gets_them_from_its_ledger(store):
    populate(store, 20)
    derived.counted(store)
    with store.engine.begin() as conn:  # as a store counted by the version before
        conn.execute(delete(Setting).where(Setting.key == derived.TOTALS))
    assert derived.stored(store) == _recount(store)
    assert settings.get(store, derived.TOTALS) == list(_recount(store))
