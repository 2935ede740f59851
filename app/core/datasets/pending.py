"""The sessions an incremental build still reads, kept per base model (`pending_sessions`): a build and the school's
new-session count cost what is new and what is left over, not every stored session.

A kept set holds every session stored below its watermark W that no used dataset holds unchanged since (the rest an
incremental build leaves unread: `Registry.unchanged_since_used`), whether a used dataset holds it by id (stored again
since: the build reads it, the count does not), and the verdict the last build of the same filters gave it (the
filter that dropped it: read again only when marked good, stored again or judged under other filters). Kept with it
in settings (`datasets.pending.<key>`): W, how many sessions lie below it, and the base model's SFT datasets with
whether each counts as used whole (a cycle learned from it, or every dataset for a person's build) or by its held-out
sessions. Bringing it up to date (one writer at a time) costs what changed: a dataset registered or learned from
takes its sessions out (one probe each), a session below W stored again or deleted is noticed by the count below W
and its row goes (one probe per kept row), the sessions stored since W come in (one probe each) and W moves to the
clock less MARGIN (a session prepared before and committed after stays above it). A dataset removed, or a session
written below W (no writer of the app dates one back), fills the set again from every session, once. Marks are no
dependency: bad and good marks are read where the set is."""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, case, delete, exists, func, literal, null, select, union, update
from sqlalchemy.exc import OperationalError

from app.core.base.schema import AgentSession, BuiltDataset, DatasetSession, SessionMark, Setting
from app.core.base.schema.base import utcnow
from app.core.base.schema.datasets import PendingSession as P
from app.core.base.store import Store
from app.core.datasets.catalog import Registry
from app.core.datasets.config import BuildConfig

KEY = "datasets.pending."  # + key(): the settings row of a kept set
MARGIN = timedelta(minutes=10)  # W lags the clock: a session prepared before a look and committed after is above it
ADVANCE = 500  # a look that only reads moves W up once this many sessions lie above it
VERDICTS = 1  # part of every scope: raise it when what the filters decide changes, so every session is judged again


def key(base_model: str, learned: Collection[str] | None) -> str:
    """One kept set per base model and kind of build: a cycle's (`learned`: the datasets its cycles trained on, used
    whole) or a person's (None: every earlier dataset used whole)."""
    return hashlib.sha256(base_model.encode()).hexdigest()[:32] + ("*" if learned is None else "")


def scope(config: BuildConfig) -> str:
    """What a verdict depends on besides the session: the filters (near-duplicates and example length aside: those
    depend on other sessions and on the renderer) and how a session becomes a conversation."""
    parts = {"v": VERDICTS, "filters": config.filters.model_dump(exclude={"near_duplicate", "min_tokens"}),
             "thinking": config.thinking, "max_tool_output": config.max_tool_output}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Kept:
    watermark: datetime
    below: int  # sessions of any kind stored below the watermark
    datasets: list[list]  # [id, used whole] of the base model's SFT datasets, oldest first

    def dump(self) -> str:
        return json.dumps({"watermark": self.watermark.isoformat(), "below": self.below, "datasets": self.datasets})


def _load(s, k: str) -> Kept | None:
    row = s.get(Setting, KEY + k)
    return _parse(row.value if row else None)


def _parse(text: str | None) -> Kept | None:
    value = json.loads(text) if text else None
    if not isinstance(value, dict):
        return None
    return Kept(datetime.fromisoformat(value["watermark"]), value["below"], value["datasets"])


def _datasets(s, base_model: str, learned: Collection[str] | None) -> list[list]:
    rows = s.execute(select(BuiltDataset.id, BuiltDataset.name).where(
        BuiltDataset.base_model == base_model, BuiltDataset.kind == "sft").order_by(BuiltDataset.id)).all()
    return [[i, learned is None or name in learned] for i, name in rows]


def _extends(old: list[list], new: list[list]) -> bool:
    """Only datasets added, or become used whole: what the kept rows can follow by deltas."""
    now = dict(map(tuple, new))
    return all(i in now and (now[i] or not whole) for i, whole in old)


def refresh(store: Store, base_model: str, learned: Collection[str] | None) -> Kept | None:
    """Bring the kept set up to date and W up to the clock less MARGIN; None when the store cannot be written
    (read-only, or busy past its timeout): the caller reads every session instead."""
    k, registry = key(base_model, learned), Registry(store)
    ucsu, used = registry.unchanged_since_used(base_model, learned), registry.used_clause(base_model, learned)
    try:
        with store.session() as s:
            if store.postgres:
                store.lock(s, "pending")
            else:  # SQLite: take its one writer before reading, so nothing changes between the reads and the writes
                s.execute(store.insert(Setting).values(key=KEY + k, value="null").on_conflict_do_nothing())
            kept, deps, later = _load(s, k), _datasets(s, base_model, learned), utcnow() - MARGIN
            below = s.scalar(_below(kept.watermark)) if kept else 0
            if kept is None or below > kept.below or not _extends(kept.datasets, deps):
                kept = _fill(s, k, ucsu, used, later, deps)
            else:
                if below < kept.below:  # stored again (now above W) or deleted: its row goes
                    s.execute(delete(P).where(P.model == k, ~exists().where(
                        AgentSession.id == P.session_id, AgentSession.updated_at < kept.watermark)))
                _take_used(s, k, kept.datasets, deps)
                since = kept.watermark
                if later > since:
                    between = (AgentSession.updated_at >= since, AgentSession.updated_at < later)
                    s.execute(delete(P).where(P.model == k, P.session_id.in_(select(AgentSession.id).where(*between))))
                    s.execute(_rows(k, ucsu, used, *between))
                    kept = Kept(later, below + s.scalar(select(func.count()).select_from(AgentSession)
                                                        .where(*between)), deps)
                else:
                    kept = Kept(since, below, deps)
            s.execute(store.insert(Setting).values(key=KEY + k, value=kept.dump()).on_conflict_do_update(
                index_elements=[Setting.key], set_={"value": kept.dump()}))
        return kept
    except OperationalError:
        return None


def _fill(s, k: str, ucsu, used, later: datetime, deps: list[list]) -> Kept:
    """The set again from every session stored below `later` (one probe each): the first time, or after a change
    no delta follows."""
    s.execute(delete(P).where(P.model == k))
    s.execute(_rows(k, ucsu, used, AgentSession.updated_at < later))
    return Kept(later, s.scalar(_below(later)), deps)


def _rows(k: str, ucsu, used, *where):
    """INSERT … SELECT of the sessions matching `where` that no used dataset holds unchanged since."""
    cols = ("model", "session_id", "stored_at", "root", "used", "scope", "verdict")
    picked = select(literal(k), AgentSession.id, AgentSession.updated_at,
                    case((AgentSession.parent_id.is_(None), 1), else_=0), case((used, 1), else_=0), null(), null()
                    ).where(*where, ~ucsu)
    return P.__table__.insert().from_select(cols, picked)


def _take_used(s, k: str, old: list[list], new: list[list]) -> None:
    """Datasets registered, or become used whole, since: the sessions they use leave the set if stored before them,
    else stay marked used (one probe per session they hold)."""
    before = dict(map(tuple, old))
    for i, whole in new:
        if before.get(i) == whole:
            continue
        held = select(DatasetSession.session_id).where(DatasetSession.dataset_id == i,
                                                       *(() if whole else (DatasetSession.split == "test",)))
        built = select(BuiltDataset.created_at).where(BuiltDataset.id == i).scalar_subquery()
        s.execute(delete(P).where(P.model == k, P.session_id.in_(held), P.stored_at < built))
        s.execute(update(P).where(P.model == k, P.session_id.in_(held)).values(used=1))


def _below(until: datetime):
    """Sessions of any kind stored below `until`: every session less those at or above it (SQLite counts a whole
    table without reading its keys, ~5x faster than a range below `until` of ix_sessions_updated_at)."""
    every = select(func.count()).select_from(AgentSession).scalar_subquery()
    above = select(func.count()).select_from(AgentSession).where(AgentSession.updated_at >= until).scalar_subquery()
    return select(every - above)


def _root():
    """`parent_id IS NULL` in a form no index serves (without statistics SQLite would walk ix_sessions_parent_id)."""
    return case((AgentSession.parent_id.is_(None), 1), else_=0) == 1


def _marked(bad: bool):
    return select(SessionMark.session_id).where(SessionMark.weight <= 0 if bad else SessionMark.weight > 1.0)


def new_count(store: Store, base_model: str, learned: Collection[str]) -> int:
    """Top-level sessions, not marked bad, in no used dataset (`Registry.used_clause`), at any time: the kept rows
    plus the sessions stored since W (one probe each), in one statement. Brings the set up to date first when a
    dependency changed, a session below W went or ADVANCE sessions lie above it."""
    k, used = key(base_model, learned), Registry(store).used_clause(base_model, learned)
    for _ in range(2):
        with store.session() as s:
            kept, deps = _load(s, k), _datasets(s, base_model, learned)
        if kept is not None and kept.datasets == deps:
            since, later = kept.watermark, utcnow() - MARGIN
            mine = select(func.count()).select_from(P).where(P.model == k, P.root == 1, P.used == 0,
                                                             P.session_id.not_in(_marked(bad=True))).scalar_subquery()
            fresh = select(func.count()).select_from(AgentSession).where(
                AgentSession.updated_at >= since, _root(), AgentSession.id.not_in(_marked(bad=True)), ~used
            ).scalar_subquery()
            passed = select(func.count()).select_from(AgentSession).where(
                AgentSession.updated_at >= since, AgentSession.updated_at < later).scalar_subquery()
            now = select(Setting.value).where(Setting.key == KEY + k).scalar_subquery()  # the rows' own, or moved
            with store.session() as s:
                below, counted, new, moved, text = s.execute(
                    select(_below(since).scalar_subquery(), mine, fresh, passed, now)).one()
                again = _datasets(s, base_model, learned)
            if _parse(text) == kept and below == kept.below and again == deps and moved < ADVANCE:
                return counted + new
        if refresh(store, base_model, learned) is None:
            break
    with store.session() as s:  # the store cannot be written: one probe per stored session
        return s.scalar(select(func.count()).select_from(AgentSession).where(
            _root(), AgentSession.id.not_in(_marked(bad=True)), ~used))


@dataclass
class Loaded:
    """What an incremental build reads: the sessions to judge (oldest first), and the counts of the rest."""

    sessions: list[Any]  # not marked bad, no verdict of this scope (or marked good)
    stored: int  # every stored session
    read: int  # sessions not left unread (no used dataset holds them unchanged)
    bad: int  # of those, marked bad
    settled: Counter  # verdict -> sessions it dropped, not read again


@dataclass
class Reading:
    """An incremental build's view of the kept set, just brought up to date."""

    key: str
    watermark: datetime
    scope: str
    ucsu: Any  # Registry.unchanged_since_used

    def load(self, store: Store) -> Loaded:
        bad, good = _marked(bad=True), _marked(bad=False)
        fresh = select(AgentSession.id).where(AgentSession.updated_at >= self.watermark, ~self.ucsu)
        read = union(select(P.session_id).where(P.model == self.key), fresh).subquery()
        judged = (P.scope == self.scope) & P.verdict.is_not(None) & P.session_id.not_in(good)
        todo = union(select(P.session_id).where(P.model == self.key, P.session_id.not_in(bad), ~judged),
                     fresh.where(AgentSession.id.not_in(bad)))
        with store.session() as s:
            stored, n, n_bad = s.execute(select(
                select(func.count()).select_from(AgentSession).scalar_subquery(),
                select(func.count()).select_from(read).scalar_subquery(),
                select(func.count()).select_from(read).where(read.c[0].in_(bad)).scalar_subquery())).one()
            settled = Counter(dict(s.execute(select(P.verdict, func.count()).where(
                P.model == self.key, judged, P.session_id.not_in(bad), P.session_id.not_in(fresh))
                .group_by(P.verdict)).all()))
            sessions = list(s.scalars(select(AgentSession).where(AgentSession.id.in_(todo))
                                      .order_by(AgentSession.started_at, AgentSession.id)))
        return Loaded(sessions, stored, n, n_bad, settled)

    def judged(self, store: Store, verdicts: dict[str, str]) -> None:
        """Keep what the build decided of the sessions it read below W (a session stored again since loses it)."""
        if not verdicts:
            return
        stmt = update(P).where(P.model == self.key, P.session_id == bindparam("sid")).values(
            scope=self.scope, verdict=bindparam("why"))
        try:
            with store.session() as s:
                s.connection().execute(stmt, [{"sid": sid, "why": why} for sid, why in verdicts.items()])
        except OperationalError:  # busy or read-only: the next build judges them again
            pass


def reading(store: Store, config: BuildConfig) -> Reading | None:
    """The kept set of this build's kind, brought up to date; None when the store cannot be written."""
    kept = refresh(store, config.base_model, config.learned_from)
    if kept is None:
        return None
    ucsu = Registry(store).unchanged_since_used(config.base_model, config.learned_from)
    return Reading(key(config.base_model, config.learned_from), kept.watermark, scope(config), ucsu)
