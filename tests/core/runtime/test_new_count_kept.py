"""The school's new-session count over the kept set (app/core/datasets/pending) equals the full count after every
change: sessions stored, stored again (their rows deleted and inserted, as capture and the team server do), deleted,
stored with an old `updated_at`, marked bad, good or unmarked, datasets registered (by hand, another base model, a
preference set) or removed, cycles learning from them: in random order with fixed seeds, for two base models. The
full count here is worked out in Python from the rows, not by the code under test. Real store (SQLite)."""
from __future__ import annotations

import random
from datetime import timedelta

import pytest
from sqlalchemy import delete, func, insert, select

from app.core.base import settings
from app.core.base.schema import AgentSession, BuiltDataset, DatasetSession, SessionMark
from app.core.base.schema.base import utcnow
from app.core.base.schema.datasets import PendingSession
from app.core.datasets import pending
from app.core.runtime.school import cycles
from app.core.runtime.school.triggers import new_sessions
from tests.pg import any_store  # noqa: F401 - fixture

MODELS = ("default", "/models/" + "a-long-path/" * 8 + "base")  # the second: longer than a settings key


def full_count(store, base_model: str) -> int:
    """Top-level sessions, not marked bad, in no dataset of this base model a cycle learned from, held out by none."""
    learned = set(cycles.learned_from(store, base_model))
    with store.session() as s:
        roots = {sid for sid, parent in s.execute(select(AgentSession.id, AgentSession.parent_id)) if parent is None}
        bad = {sid for sid, weight in s.execute(select(SessionMark.session_id, SessionMark.weight)) if weight <= 0}
        sets = {i: (kind, model, name) for i, kind, model, name in s.execute(
            select(BuiltDataset.id, BuiltDataset.kind, BuiltDataset.base_model, BuiltDataset.name))}
        rows = s.execute(select(DatasetSession.dataset_id, DatasetSession.session_id, DatasetSession.split)).all()
    used = {sid for i, sid, split in rows
            if sets[i][:2] == ("sft", base_model) and (split == "test" or sets[i][2] in learned)}
    return len(roots - bad - used)


def stored(store, sid: str, subagents: int = 0, at=None) -> None:
    """Store a session as capture does: its rows and its sub-agents' go, the new ones come (updated_at: now)."""
    at = at or utcnow()
    rows = [{"id": sid, "agent": "claude", "native_id": sid, "parent_id": None, "source_path": f"/t/{sid}.jsonl",
             "updated_at": at}]
    rows += [{"id": f"{sid}.{k}", "agent": "claude", "native_id": f"{sid}.{k}", "parent_id": sid,
              "source_path": "/t/sub", "updated_at": at} for k in range(subagents)]
    with store.engine.begin() as conn:
        conn.execute(delete(AgentSession).where((AgentSession.id == sid) | (AgentSession.parent_id == sid)))
        conn.execute(insert(AgentSession), rows)


def registered(store, base_model: str, name: str, splits: dict[str, str], kind: str = "sft") -> None:
    """A dataset as Registry._insert records it: the row and its sessions in one transaction."""
    with store.session() as s:
        row = BuiltDataset(name=name, kind=kind, base_model=base_model, fingerprint=name, spec_id="chat_sft_v1",
                           template_sha256="t", path=f"/nowhere/{name}", mode="full", manifest_json="{}")
        s.add(row)
        s.flush()
        s.add_all([DatasetSession(dataset_id=row.id, session_id=sid, split=split, content_sha256="c")
                   for sid, split in splits.items()])


def learned(store, base_model: str, name: str, training: bool = True) -> None:
    """A cycle of this base model built `name`; it learned from it once its training stage started."""
    c = cycles.create(store, base_model, "test", {})
    cycles.update(store, c.id, outputs={"building": {"dataset": name}, **({"training": {"job": "j"}} if training
                                                                           else {})})


def ids(store, roots: bool = False) -> list[str]:
    with store.session() as s:
        q = select(AgentSession.id)
        return sorted(s.scalars(q.where(AgentSession.parent_id.is_(None)) if roots else q))


class Steps:
    """One random change to the store at a time."""

    def __init__(self, store, rng: random.Random, old: bool) -> None:
        self.store, self.rng, self.n = store, rng, 0
        self.kinds = ["new", "new", "new", "again", "again", "gone", "mark", "mark", "dataset", "learn", "removed"]
        self.kinds += ["old"] if old else []  # a session stored with an old updated_at

    def pool(self) -> str:
        return f"s{self.rng.randrange(60)}"

    def one(self) -> str:
        store, rng = self.store, self.rng
        kind = rng.choice(self.kinds)
        have = ids(store, roots=True)
        if kind == "new" or (kind in ("again", "gone") and not have):
            stored(store, self.pool(), subagents=rng.choice((0, 0, 1, 2)))
        elif kind == "again":
            stored(store, rng.choice(have), subagents=rng.choice((0, 1)))
        elif kind == "old":  # a new session only: one that also took rows below the watermark away is the change
            self.n += 1     # a count cannot see (pending's docstring); no writer of the app dates a row back
            stored(store, f"old{self.n}", at=utcnow() - timedelta(days=rng.randrange(1, 400)))
        elif kind == "gone":
            with store.session() as s:
                s.execute(delete(AgentSession).where(AgentSession.id == rng.choice(ids(store))))
        elif kind == "mark":
            sid = self.pool()
            with store.session() as s:
                if rng.random() < 0.25:
                    s.execute(delete(SessionMark).where(SessionMark.session_id == sid))
                else:
                    s.merge(SessionMark(session_id=sid, weight=rng.choice((0.0, 0.0, 2.0, 1.0))))
        elif kind == "dataset":
            self.n += 1
            chosen = rng.sample(have + [self.pool()], k=min(len(have) + 1, rng.randrange(1, 12)))
            registered(store, rng.choice(MODELS), f"d{self.n}", {sid: rng.choice(("train", "train", "val", "test"))
                                                                  for sid in chosen},
                       kind=rng.choice(("sft", "sft", "sft", "preference")))
        elif kind == "learn":
            with store.session() as s:
                found = s.execute(select(BuiltDataset.base_model, BuiltDataset.name)).all()
            model, name = rng.choice(found) if found and rng.random() < 0.9 else (rng.choice(MODELS), "not-built")
            learned(store, model, name, training=rng.random() < 0.8)
        elif kind == "removed":
            with store.session() as s:
                gone = s.scalars(select(BuiltDataset.id)).all()
                if gone:
                    s.execute(delete(BuiltDataset).where(BuiltDataset.id == rng.choice(gone)))
        return kind


@pytest.mark.parametrize(("margin", "advance"), [(timedelta(0), 10**9), (timedelta(0), 2), (pending.MARGIN, 2)])
@pytest.mark.parametrize("seed", [7, 2026])
def test_the_kept_count_equals_the_full_count_after_every_change(store, monkeypatch, seed, margin, advance):
    """margin 0: every session stored before a recount is below the watermark (the kept side is exercised);
    the real margin: the sessions of the last minutes stay above it. advance 2: looks move the watermark up."""
    monkeypatch.setattr(pending, "MARGIN", margin)
    monkeypatch.setattr(pending, "ADVANCE", advance)
    recounts = []
    fill = pending._fill
    monkeypatch.setattr(pending, "_fill", lambda *a: recounts.append(a[1]) or fill(*a))
    steps, looks = Steps(store, random.Random(seed), old=True), 0
    for i in range(160):
        kind = steps.one()
        for model in MODELS:
            looks += 1
            assert new_sessions(store, model) == full_count(store, model), (seed, i, kind, model)
    assert full_count(store, MODELS[0]) > 0
    assert len(recounts) < looks / 2  # most looks were served by the kept count


@pytest.mark.parametrize("any_store", ["postgresql"], indirect=True)
def test_the_kept_count_on_postgresql(any_store, monkeypatch):
    """The same walk on a team's store: PostgreSQL's timestamps, settings JSON and queries (one seed, looks move the
    watermark up)."""
    monkeypatch.setattr(pending, "MARGIN", timedelta(0))
    monkeypatch.setattr(pending, "ADVANCE", 2)
    steps = Steps(any_store, random.Random(7), old=True)
    for i in range(80):
        kind = steps.one()
        for model in MODELS:
            assert new_sessions(any_store, model) == full_count(any_store, model), (i, kind, model)
    assert full_count(any_store, MODELS[0]) > 0


@pytest.mark.parametrize("seed", [11, 12])
def test_several_changes_between_two_looks(store, monkeypatch, seed):
    """Looks seldom: one to five changes between two (no session stored with an old updated_at: see the module's
    docstring for what a count cannot see)."""
    monkeypatch.setattr(pending, "MARGIN", timedelta(0))
    rng = random.Random(seed)
    steps = Steps(store, rng, old=False)
    for i in range(60):
        done = [steps.one() for _ in range(rng.randrange(1, 6))]
        model = rng.choice(MODELS)
        assert new_sessions(store, model) == full_count(store, model), (seed, i, done, model)


def test_what_fills_the_set_again_and_what_does_not(store, monkeypatch):
    """Only the first look, a dataset removed and a session written below the watermark read every session again;
    everything else is a delta (a write) or a read."""
    monkeypatch.setattr(pending, "MARGIN", timedelta(0))
    fills, writes = [], []
    fill, refresh = pending._fill, pending.refresh
    monkeypatch.setattr(pending, "_fill", lambda *a: fills.append(1) or fill(*a))
    monkeypatch.setattr(pending, "refresh", lambda *a, **k: writes.append(1) or refresh(*a, **k))

    def look(expected: int, filled: bool, wrote: bool) -> None:
        before = len(fills), len(writes)
        assert new_sessions(store, "default") == expected == full_count(store, "default")
        assert (len(fills) - before[0], len(writes) - before[1]) == (int(filled), int(wrote))

    for i in range(5):
        stored(store, f"s{i}", subagents=1)
    look(5, filled=True, wrote=True)  # the first look
    look(5, filled=False, wrote=False)
    stored(store, "s5")
    look(6, filled=False, wrote=False)  # a new session: above the watermark, one probe
    with store.session() as s:
        s.merge(SessionMark(session_id="s1", weight=0.0))
    look(5, filled=False, wrote=False)  # a bad mark: read where the set is
    stored(store, "s0", subagents=3)  # stored again: it left the sessions below the watermark, its row goes
    look(5, filled=False, wrote=True)
    stored(store, "s6")
    look(6, filled=False, wrote=False)
    stored(store, "s6", subagents=2)  # stored again above the watermark: still counted once
    look(6, filled=False, wrote=False)
    registered(store, "default", "by-hand", {"s2": "train", "s3": "test"})
    look(5, filled=False, wrote=True)  # a dataset: its held-out session is used (a delta)
    learned(store, "default", "by-hand")
    look(4, filled=False, wrote=True)  # a cycle learned from it (a delta)
    registered(store, MODELS[1], "other", {"s4": "test"})
    look(4, filled=False, wrote=False)  # another base model's dataset
    with store.session() as s:
        s.execute(delete(AgentSession).where(AgentSession.id == "s4"))
    look(3, filled=False, wrote=True)
    stored(store, "old", at=utcnow() - timedelta(days=3))  # written below the watermark
    look(4, filled=True, wrote=True)
    with store.session() as s:
        s.execute(delete(BuiltDataset).where(BuiltDataset.name == "by-hand"))
    look(6, filled=True, wrote=True)  # a dataset removed
    kept = settings.get(store, pending.KEY + pending.key("default", []))
    assert set(kept) == {"watermark", "below", "datasets"} and len(pending.KEY + pending.key(MODELS[1], None)) <= 60


def test_a_session_prepared_before_a_recount_and_stored_after_it_is_counted(store):
    """Capture prepares a session's rows (updated_at included) before its write transaction: one that commits just
    after a recount has an updated_at before it, within MARGIN, so it is above the watermark."""
    stored(store, "s0")
    assert new_sessions(store, "default") == 1
    stored(store, "s1", at=utcnow() - pending.MARGIN / 2)
    assert new_sessions(store, "default") == 2 == full_count(store, "default")


def test_a_look_moves_the_watermark_up(store, monkeypatch):
    """Sessions pile up above the watermark (no cycle learns): a look takes them into the set once."""
    monkeypatch.setattr(pending, "MARGIN", timedelta(0))
    monkeypatch.setattr(pending, "ADVANCE", 3)
    stored(store, "s0")
    assert new_sessions(store, "default") == 1
    at = pending.KEY + pending.key("default", [])
    first = settings.get(store, at)
    for i in range(1, 4):
        stored(store, f"s{i}", subagents=1)
    assert new_sessions(store, "default") == 4  # 6 sessions above the watermark: it moves
    moved = settings.get(store, at)
    assert moved["watermark"] > first["watermark"] and moved["below"] == 7
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(PendingSession)) == 7
        s.merge(SessionMark(session_id="s2", weight=0.0))
    stored(store, "s3")  # stored again from below the new watermark
    assert new_sessions(store, "default") == 3 == full_count(store, "default")
