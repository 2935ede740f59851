"""The school's new-session count at the cost of what is new: the count below an `updated_at` watermark, kept in
settings with what it depends on, plus one probe per session stored since (triggers.new_sessions reads it).

Kept under `school.new_sessions.<hash of the base model>`: the watermark W, how many sessions (of any kind) were
stored below it, how many of those were top-level and in no used dataset (`count`, marks aside), and the used
datasets it was counted with (id, learned or not). A look checks, in one statement (one snapshot): the sessions below
W still number `below` (a deleted or re-stored one has left: a re-stored one is above W now, counted once there),
then counts the sessions above W (range of ix_sessions_updated_at) and the bad marks below W (one probe per bad
mark), so marks are no dependency. Any change (a dataset registered or learned from, a session gone or re-stored
from below W) recounts everything once and sets W to the clock less MARGIN; a look moves W up to there once ADVANCE
sessions lie between (probing just those). MARGIN keeps the sessions of the last minutes above W: one prepared
before a recount and committed after it is not missed below W, and an active session stored again and again does
not recount each time. What the count cannot see: a session written below W (an `updated_at` older than MARGIN: no
writer of the app dates one back) while, between the same two looks, as many below W go."""
from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from sqlalchemy import case, exists, func, select
from sqlalchemy.exc import OperationalError

from app.core.base import settings
from app.core.base.schema import AgentSession, BuiltDataset, SessionMark
from app.core.base.schema.base import utcnow
from app.core.base.store import Store
from app.core.datasets.catalog import Registry
from app.core.runtime.school import cycles

KEY = "school.new_sessions."  # + 32 hex of the base model's sha256 (settings keys hold 60 characters)
MARGIN = timedelta(minutes=10)  # W lags the clock: a session prepared before a recount, committed after, is above W
ADVANCE = 500  # a look moves W up (to the clock less MARGIN) once this many sessions lie between


def key(base_model: str) -> str:
    return KEY + hashlib.sha256(base_model.encode()).hexdigest()[:32]


def used_datasets(store: Store, base_model: str) -> tuple[list[str], list[list]]:
    """What `Registry.used_clause` reads: the datasets the cycles learned from, and this base model's SFT datasets
    (registered in one transaction, never changed) with whether a cycle learned from each (then all its sessions are
    used, else its held-out ones)."""
    learned = cycles.learned_from(store, base_model)
    with store.session() as s:
        rows = s.execute(select(BuiltDataset.id, BuiltDataset.name).where(
            BuiltDataset.base_model == base_model, BuiltDataset.kind == "sft").order_by(BuiltDataset.id)).all()
    return learned, [[i, name in learned] for i, name in rows]


def new_sessions(store: Store, base_model: str) -> int:
    """Equal to a full count of the top-level sessions not marked bad and in no used dataset, at any time."""
    learned, deps = used_datasets(store, base_model)
    kept = settings.get(store, key(base_model))
    if isinstance(kept, dict) and kept.get("datasets") == deps:
        since, later = datetime.fromisoformat(kept["watermark"]), utcnow() - MARGIN
        used = Registry(store).used_clause(base_model, learned)
        with store.session() as s:
            below, bad, fresh, passed = s.execute(select(_below(since), _bad(since, used), _fresh(since, used),
                                                         _below(later, since))).one()
        if below == kept["below"] and used_datasets(store, base_model)[1] == deps:  # none changed meanwhile
            if passed >= ADVANCE:
                _advance(store, base_model, kept, later, used)
            return kept["count"] - bad + fresh
        learned, deps = used_datasets(store, base_model)
    return _recount(store, base_model, learned, deps)


def _recount(store: Store, base_model: str, learned: list[str], deps: list[list]) -> int:
    """Count everything once (one probe per stored session) and keep the count below a new watermark, with the
    datasets read before it (one registered meanwhile makes the next look count again)."""
    since, used = utcnow() - MARGIN, Registry(store).used_clause(base_model, learned)
    with store.session() as s:
        below, count, bad, fresh = s.execute(select(_below(since), _unused(since, used), _bad(since, used),
                                                    _fresh(since, used))).one()
    _keep(store, base_model, since, below, count, deps)
    return count - bad + fresh


def _advance(store: Store, base_model: str, kept: dict, later: datetime, used) -> None:
    """Move the watermark up to `later`: the sessions stored between are counted once (one probe each) and join
    the count below it, so a look keeps probing only the newest."""
    since = datetime.fromisoformat(kept["watermark"])
    with store.session() as s:
        below, moved, count = s.execute(select(_below(since), _below(later, since), _unused(later, used, since))).one()
    if below == kept["below"]:  # nothing below the old watermark went meanwhile
        _keep(store, base_model, later, below + moved, kept["count"] + count, kept["datasets"])


def _keep(store: Store, base_model: str, since: datetime, below: int, count: int, deps: list[list]) -> None:
    try:
        settings.put(store, key(base_model), {"watermark": since.isoformat(), "below": below, "count": count,
                                              "datasets": deps})
    except OperationalError:  # the store is busy or read-only: the count is right, the next look counts again
        pass


def _below(until: datetime, after: datetime | None = None):
    """Every session stored below `until` (and at or after `after`): a covering range of ix_sessions_updated_at."""
    return select(func.count()).select_from(AgentSession).where(*_stored(until, after)).scalar_subquery()


def _unused(until: datetime, used, after: datetime | None = None):
    """Top-level sessions stored below `until` (and at or after `after`) in no used dataset, marks aside: one probe
    per session."""
    return select(func.count()).select_from(AgentSession).where(*_stored(until, after), _root(), ~used) \
        .scalar_subquery()


def _stored(until: datetime, after: datetime | None) -> list:
    return [AgentSession.updated_at < until] + ([AgentSession.updated_at >= after] if after is not None else [])


def _bad(since: datetime, used):
    """Of those, the ones marked bad now: one probe per bad mark (sessions by primary key)."""
    return select(func.count()).select_from(SessionMark).where(SessionMark.weight <= 0, exists().where(
        AgentSession.id == SessionMark.session_id, AgentSession.updated_at < since, _root(), ~used)).scalar_subquery()


def _fresh(since: datetime, used):
    """Top-level sessions stored at or after W, not marked bad, in no used dataset: one probe per session."""
    bad = select(SessionMark.session_id).where(SessionMark.weight <= 0)
    return select(func.count()).select_from(AgentSession).where(
        AgentSession.updated_at >= since, _root(), AgentSession.id.not_in(bad), ~used).scalar_subquery()


def _root():
    """`parent_id IS NULL` in a form no index serves: SQLite (no statistics) would walk ix_sessions_parent_id, every
    top-level session, instead of the range of ix_sessions_updated_at or a probe by id."""
    return case((AgentSession.parent_id.is_(None), 1), else_=0) == 1
