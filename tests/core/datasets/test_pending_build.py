"""An incremental build reads the kept set of what is left (app/core/datasets/pending) and gets exactly what the probe
of every stored session got: the same conversations in the same order, the same filter counts and counts, after
random changes with fixed seeds (sessions new, stored again changed or not, deleted, marked bad, good or unmarked,
filters changed, datasets registered by hand or learned from by a cycle, removed), for a cycle's build and a
person's; and the same built files. Generated sessions (bench/synthetic_sessions) in a real store (SQLite; one walk
on PostgreSQL)."""
from __future__ import annotations

import hashlib
import random
from datetime import timedelta

import pytest
from sqlalchemy import delete, insert, select

from app.core.base.schema import AgentSession, BuiltDataset, DatasetSession, MessageRow, SessionMark
from app.core.base.schema.base import utcnow
from app.core.datasets import builder, pending
from app.core.datasets.catalog import Registry
from app.core.datasets.config import BuildConfig, Filters
from app.core.datasets.examples import Build
from app.core.runtime.school import cycles
from bench.synthetic_sessions import populate
from tests.pg import any_store  # noqa: F401 - fixture

BASE = "default"
FILTERS = [Filters(), Filters(min_tool_calls=3), Filters(drop_abandoned=True, include_subagents=False)]


def both(store, config: BuildConfig) -> tuple[tuple, tuple, int]:
    """What load_conversations gives by the probe of every session and by the kept set, and how many sessions the
    kept set's way converted."""
    skip = Registry(store).unchanged_since_used(config.base_model, config.learned_from)
    old, new = Build(), Build()
    probe = builder.load_conversations(store, config, old, lambda *_: None, skip)
    reading = pending.reading(store, config)
    assert reading is not None
    loaded = reading.load(store)
    kept = builder.load_conversations(store, config, new, lambda *_: None, None, reading)
    return _seen(probe, old), _seen(kept, new), len(loaded.sessions)


def _seen(convs, b: Build) -> tuple:
    return ([(c.session_id, c.content_sha256) for c in convs], list(b.filters.items()), dict(b.counts), b.unread,
            sorted(b.trimmed))


def ids(store, roots: bool = True) -> list[str]:
    with store.session() as s:
        q = select(AgentSession.id).order_by(AgentSession.id)
        return list(s.scalars(q.where(AgentSession.parent_id.is_(None)) if roots else q))


def again(store, sid: str, changed: bool) -> None:
    """Store a session again as capture does (its rows deleted and inserted, updated_at now); `changed`: its last
    message gone (new content)."""
    with store.engine.begin() as conn:
        rows = [dict(r._mapping) for r in conn.execute(select(AgentSession.__table__).where(AgentSession.id == sid))]
        msgs = [dict(r._mapping) for r in conn.execute(select(MessageRow.__table__).where(
            MessageRow.session_id == sid).order_by(MessageRow.seq))]
        conn.execute(delete(MessageRow).where(MessageRow.session_id == sid))
        conn.execute(delete(AgentSession).where(AgentSession.id == sid))
        conn.execute(insert(AgentSession), [{**r, "updated_at": utcnow()} for r in rows])
        kept = msgs[:-1] if changed and len(msgs) > 3 else msgs
        if kept:
            conn.execute(insert(MessageRow), [{k: v for k, v in m.items() if k != "id"} for m in kept])


def register(store, convs, name: str, learn: bool) -> None:
    """A dataset of these conversations as a build registers it (splits by hash); `learn`: a cycle trained on it."""
    with store.session() as s:
        row = BuiltDataset(name=name, kind="sft", base_model=BASE, fingerprint=name, spec_id="chat_sft_v1",
                           template_sha256="t", path=f"/nowhere/{name}", mode="incremental", manifest_json="{}")
        s.add(row)
        s.flush()
        s.add_all([DatasetSession(dataset_id=row.id, session_id=c.session_id, split=_split(c.session_id),
                                  content_sha256=c.content_sha256) for c in convs])
    if learn:
        c = cycles.create(store, BASE, "test", {})
        cycles.update(store, c.id, outputs={"building": {"dataset": name}, "training": {"job": "j"}})


def _split(sid: str) -> str:
    return ("test", "val", *["train"] * 8)[int(hashlib.sha1(sid.encode()).hexdigest(), 16) % 10]


class Walk:
    """One random change to the store at a time."""

    def __init__(self, store, rng: random.Random) -> None:
        self.store, self.rng, self.size, self.n, self.filters = store, rng, 0, 0, FILTERS[0]

    def grow(self, n: int) -> None:
        populate(self.store, n, seed=3, start_index=self.size)
        self.size += n

    def config(self, person: bool) -> BuildConfig:
        learned = None if person else cycles.learned_from(self.store, BASE)
        return BuildConfig(base_model=BASE, mode="incremental", learned_from=learned, filters=self.filters)

    def one(self) -> str:
        store, rng = self.store, self.rng
        kind = rng.choice(["new", "new", "again", "again", "gone", "mark", "mark", "filters", "learn", "learn",
                           "by hand", "removed"])
        have = ids(store)
        if kind == "new":
            self.grow(rng.randrange(1, 8))
        elif kind == "again":
            for sid in rng.sample(have, k=3):
                again(store, sid, changed=rng.random() < 0.5)
        elif kind == "gone":
            with store.session() as s:
                s.execute(delete(AgentSession).where(AgentSession.id == rng.choice(ids(store, roots=False))))
        elif kind == "mark":
            for sid in rng.sample(have, k=4):
                with store.session() as s:
                    if rng.random() < 0.25:
                        s.execute(delete(SessionMark).where(SessionMark.session_id == sid))
                    else:
                        s.merge(SessionMark(session_id=sid, weight=rng.choice((0.0, 0.0, 2.0, 1.0))))
        elif kind == "filters":
            self.filters = rng.choice(FILTERS)
        elif kind in ("learn", "by hand"):
            self.n += 1
            convs = builder.load_conversations(store, self.config(person=False), Build(), lambda *_: None,
                                               Registry(store).unchanged_since_used(BASE, cycles.learned_from(
                                                   store, BASE)))
            register(store, rng.sample(convs, k=len(convs) * 3 // 4), f"d{self.n}", learn=kind == "learn")
        elif kind == "removed":
            with store.session() as s:
                gone = s.scalars(select(BuiltDataset.id)).all()
                if gone and rng.random() < 0.5:
                    s.execute(delete(BuiltDataset).where(BuiltDataset.id == rng.choice(gone)))
        return kind


def walk(store, seed: int, steps: int) -> None:
    w = Walk(store, random.Random(seed))
    w.grow(120)
    register(store, builder.load_conversations(store, w.config(person=False), Build(), lambda *_: None),
             "start", learn=True)
    for i in range(steps):
        kind = w.one()
        for person in (False, True):
            probe, kept, _ = both(store, w.config(person))
            assert kept == probe, (seed, i, kind, person)


@pytest.mark.parametrize("seed", [5, 2026])
def test_the_kept_set_reads_what_the_probe_reads(store, monkeypatch, seed):
    monkeypatch.setattr(pending, "MARGIN", timedelta(0))
    walk(store, seed, 40)


@pytest.mark.parametrize("any_store", ["postgresql"], indirect=True)
def test_the_kept_set_on_postgresql(any_store, monkeypatch):
    monkeypatch.setattr(pending, "MARGIN", timedelta(0))
    walk(any_store, 7, 12)


def test_what_a_build_reads_again(store, monkeypatch):
    """Sessions the filters dropped are read once per filters: then counted from their verdict, unless marked good,
    stored again or the filters change."""
    monkeypatch.setattr(pending, "MARGIN", timedelta(0))
    w = Walk(store, random.Random(1))
    w.grow(150)
    register(store, [c for c in builder.load_conversations(store, w.config(False), Build(), lambda *_: None)],
             "start", learn=True)
    w.grow(20)
    probe, kept, loaded = both(store, w.config(False))
    read = probe[2]["sessions"] - probe[3]  # every session no learned dataset holds unchanged
    assert kept == probe and loaded == read > len(probe[0]) > 0
    probe, kept, loaded = both(store, w.config(False))
    assert kept == probe and loaded == len(probe[0])  # the dropped ones: counted from their verdicts
    with store.session() as s:
        settled = s.scalars(select(pending.P.session_id).where(pending.P.verdict.is_not(None))).all()
        s.merge(SessionMark(session_id=settled[0], weight=2.0))
    assert len(settled) == read - loaded
    probe, kept, loaded = both(store, w.config(False))
    assert kept == probe and loaded == len(probe[0]) and probe[2]["kept: marked good"] == 1
    again(store, settled[1], changed=False)
    probe, kept, loaded = both(store, w.config(False))
    assert kept == probe and loaded == len(probe[0]) + 1  # stored again: judged again
    w.filters = FILTERS[1]
    probe, kept, loaded = both(store, w.config(False))
    assert kept == probe and loaded == read  # other filters: every leftover judged again


def test_the_built_files_are_the_same(store, tiny_model, tmp_path, monkeypatch):
    """A whole incremental build by the kept set and by the probe: the same examples, splits and manifest counts."""
    from engine import render

    monkeypatch.setattr(pending, "MARGIN", timedelta(0))
    renderer = render.load(str(tiny_model), tiny_model.parent)
    w = Walk(store, random.Random(9))
    w.grow(60)
    register(store, builder.load_conversations(store, w.config(False), Build(), lambda *_: None), "start", True)
    w.grow(12)
    for sid in ids(store)[:3]:
        again(store, sid, changed=True)
    config = w.config(False).model_copy(update={"name": "new", "max_length": 512, "replay": 0.0})
    builder.build(store, config, renderer, tmp_path / "first")  # the kept set judges the leftovers
    made = {}
    for way in ("kept", "probe"):
        if way == "probe":
            monkeypatch.setattr(pending, "reading", lambda *_: None)
        made[way] = builder.build(store, config, renderer, tmp_path / way).model_dump(exclude={"created_at"})
    assert made["kept"] == made["probe"] and made["kept"]["splits"]["train"]["examples"] > 0
    assert made["kept"]["filters"]["errored"] + made["kept"]["filters"]["fewer than 1 tool calls"] > 0
    for file in ("train.jsonl", "val.jsonl", "test.jsonl", "report.json"):
        assert (tmp_path / "kept" / file).read_bytes() == (tmp_path / "probe" / file).read_bytes()

