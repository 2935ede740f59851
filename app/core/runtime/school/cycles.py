"""Cycle rows: create, read, and the stage bookkeeping that makes a restart resume a stage instead of repeating it."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select, update as sql_update

from app.core.base.schema import CycleRow, utcnow
from app.core.base.store import Store
from app.core.datasets import pending

STAGES = ("building", "training", "refining", "judging", "exporting", "deploying")
ACTIVE = ("running", "approval")  # a cycle in one of these states is the current cycle
ENDED = ("done", "refused", "failed")


@dataclass
class Cycle:
    """A cycle row with its JSON columns decoded."""

    id: int
    base_model: str
    stage: str
    state: str
    trigger: str = ""
    inputs: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)
    times: dict = field(default_factory=dict)
    starts: dict = field(default_factory=dict)
    resumes: dict = field(default_factory=dict)
    reason: str = ""
    report: dict = field(default_factory=dict)
    started_at: datetime | None = None
    updated_at: datetime | None = None
    ended_at: datetime | None = None

    @classmethod
    def of(cls, row: CycleRow) -> Cycle:
        decoded = {name: json.loads(getattr(row, f"{name}_json") or "{}")
                   for name in ("inputs", "outputs", "times", "starts", "resumes", "report")}
        return cls(row.id, row.base_model, row.stage, row.state, row.trigger, reason=row.reason,
                   started_at=row.started_at, updated_at=row.updated_at, ended_at=row.ended_at, **decoded)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items()}
        for key in ("started_at", "updated_at", "ended_at"):
            out[key] = out[key].isoformat() if out[key] else None
        return out


def create(store: Store, base_model: str, trigger: str, inputs: dict) -> Cycle:
    with store.session() as s:
        row = CycleRow(base_model=base_model, stage=STAGES[0], state="running", trigger=trigger,
                       inputs_json=json.dumps(inputs))
        s.add(row)
        s.flush()
        return Cycle.of(row)


def start(store: Store, base_model: str, trigger: str, inputs: dict) -> tuple[Cycle, bool]:
    """The current cycle, else a new one: (cycle, created). The look and the insert hold the cycles' lock
    (PostgreSQL's advisory lock; SQLite's writer), so two processes ("run now" beside the daemon, two runtimes on
    one PostgreSQL store) start one cycle between them."""
    with store.session() as s:
        if store.postgres:
            store.lock(s, "cycles")
        else:  # take SQLite's write lock before looking
            s.execute(sql_update(CycleRow).where(CycleRow.id < 0).values(id=CycleRow.id))
        running = s.scalars(select(CycleRow).where(CycleRow.state.in_(ACTIVE)).order_by(CycleRow.id.desc())).first()
        if running is not None:
            return Cycle.of(running), False
        row = CycleRow(base_model=base_model, stage=STAGES[0], state="running", trigger=trigger,
                       inputs_json=json.dumps(inputs))
        s.add(row)
        s.flush()
        return Cycle.of(row), True


def get(store: Store, cycle_id: int) -> Cycle | None:
    with store.session() as s:
        row = s.get(CycleRow, cycle_id)
        return Cycle.of(row) if row else None


def current(store: Store) -> Cycle | None:
    with store.session() as s:
        row = s.scalars(select(CycleRow).where(CycleRow.state.in_(ACTIVE)).order_by(CycleRow.id.desc())).first()
        return Cycle.of(row) if row else None


def history(store: Store, limit: int = 20) -> list[Cycle]:
    with store.session() as s:
        return [Cycle.of(r) for r in s.scalars(select(CycleRow).order_by(CycleRow.id.desc()).limit(limit))]


def last_ended(store: Store) -> Cycle | None:
    with store.session() as s:
        row = s.scalars(select(CycleRow).where(CycleRow.state.in_(ENDED)).order_by(CycleRow.id.desc())).first()
        return Cycle.of(row) if row else None


def learned_from(store: Store, base_model: str) -> list[str]:
    """What is no longer new for the school: the datasets its cycles of this base model trained on (their training
    stage ended), oldest first. The one definition: the session count (triggers.new_sessions) and the cycle's build
    (BuildConfig.learned_from) both follow it, so a dataset a person built by hand, trained on or not, neither lowers
    the count nor empties the next cycle's build."""
    with store.session() as s:
        rows = s.scalars(select(CycleRow).where(CycleRow.base_model == base_model).order_by(CycleRow.id))
        found = [Cycle.of(r).outputs for r in rows]
    return [out["building"]["dataset"] for out in found if "training" in out and "dataset" in out.get("building", {})]


def last_trained(store: Store) -> Cycle | None:
    """The newest ended cycle that got as far as training (the cool-down counts from its end: a cycle that failed
    before training leaves none)."""
    with store.session() as s:
        rows = s.scalars(select(CycleRow).where(CycleRow.state.in_(ENDED)).order_by(CycleRow.id.desc()))
        return next((c for c in map(Cycle.of, rows) if "training" in c.starts), None)


def update(store: Store, cycle_id: int, **changes: Any) -> Cycle:
    """Write changes (JSON fields by their plain names) in one transaction."""
    with store.session() as s:
        row = s.get(CycleRow, cycle_id, with_for_update=True)
        _write(row, changes)
        s.flush()
        return Cycle.of(row)


def _write(row: CycleRow, changes: dict[str, Any]) -> None:
    for key, value in changes.items():
        if key in ("inputs", "outputs", "times", "starts", "resumes", "report"):
            setattr(row, f"{key}_json", json.dumps(value, default=str))
        else:
            setattr(row, key, value)
    row.updated_at = utcnow()


def begin_stage(store: Store, cycle: Cycle, stage: str) -> tuple[Cycle, bool]:
    """Enter `stage`: a first entry counts a start; entering it again after a restart counts a resume.
    Returns (cycle, resumed). The stage is claimed on the stored row, locked (PostgreSQL: SELECT … FOR UPDATE;
    SQLite: its one writer), not on the caller's copy: of two processes entering it at once, one starts it."""
    with store.session() as s:
        if not store.postgres:  # take SQLite's write lock before reading, as FOR UPDATE does
            s.execute(sql_update(CycleRow).where(CycleRow.id == cycle.id).values(id=CycleRow.id))
        row = s.get(CycleRow, cycle.id, with_for_update=True)
        now = Cycle.of(row)
        resumed = stage in now.starts
        if resumed:
            changes: dict[str, Any] = {"stage": stage, "resumes": {**now.resumes, stage: now.resumes.get(stage, 0) + 1}}
        else:
            times = {**now.times, stage: {"started": utcnow().isoformat(), "ended": None, "seconds": None}}
            changes = {"stage": stage, "times": times, "starts": {**now.starts, stage: 1}}
        _write(row, changes)
        s.flush()
        return Cycle.of(row), resumed


def end_stage(store: Store, cycle: Cycle, stage: str, output: dict) -> Cycle:
    """Record what a stage produced and when it ended (its time counts from its first start)."""
    times = dict(cycle.times)
    entry = dict(times.get(stage) or {"started": utcnow().isoformat()})
    ended = utcnow()
    entry["ended"] = ended.isoformat()
    entry["seconds"] = round((ended - datetime.fromisoformat(entry["started"])).total_seconds(), 3)
    times[stage] = entry
    done = update(store, cycle.id, times=times, outputs={**cycle.outputs, stage: output})
    if stage == "training":  # its dataset is learned from now: its sessions leave the kept set here, not at a look
        pending.refresh(store, cycle.base_model, learned_from(store, cycle.base_model))
    return done


def finish(store: Store, cycle: Cycle, state: str, reason: str = "", report: dict | None = None) -> Cycle:
    return update(store, cycle.id, state=state, reason=reason, report=report or cycle.report, ended_at=utcnow())
