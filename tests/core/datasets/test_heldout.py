"""The held-out set grows with the corpus: each build holds out a stable-hash share of its new sessions, for ever; a
session once trained on is never held out; each build's test split is the whole held-out set so far. Real builds
(the builder in-process, the tiny model's tokenizer) on real stored sessions; no training."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from app.core.base.fingerprint import sha256_file
from app.core.datasets import builder, manifest as M
from app.core.datasets.catalog import Registry
from app.core.datasets.config import BuildConfig, Filters
from app.core.datasets.splits import split_of
from app.core.datasets.validate import validate_folder
from tests.core.datasets.helpers import ingest, records, write_session

VAL = 0.2


@pytest.fixture(scope="module")
def renderer(tiny_model):
    from engine import render

    return render.load(str(tiny_model), tiny_model.parent)


@dataclass
class History:
    """What the builds made, one entry per build."""

    names: list[str] = field(default_factory=list)
    manifests: list[M.Manifest] = field(default_factory=list)
    heldout: list[frozenset[str]] = field(default_factory=list)  # the registry's held-out set after each build
    new: list[set[str]] = field(default_factory=list)  # sessions no earlier build used
    folders: list[Path] = field(default_factory=list)


def run_builds(renderer, model: str, batches: list[int], shares: list[float], modes: list[str],
               then: Callable[[History], None] = lambda h: None,
               learned: list[set[int] | None] | None = None) -> None:
    """Build once per batch of new sessions (each build with its own test share and mode) in a fresh data dir, check
    the properties, then `then` (before the data dir goes). learned: per build, which earlier builds count as trained
    on (BuildConfig.learned_from, as a cycle passes it; None: every earlier one, as a person's build)."""
    from app.core.base.store import Store

    h, index = History(), 0
    with tempfile.TemporaryDirectory() as home, patch.dict(os.environ, {"NIGHTSCHOOL_HOME": home}):
        store, agent = Store(), Path(home) / "agent" / "-home-me-proj"
        agent.mkdir(parents=True)
        try:
            for k, (count, share, mode) in enumerate(zip(batches, shares, modes)):
                for _ in range(count):
                    write_session(agent, index)
                    index += 1
                ingest(store, agent)
                trained = (learned or [None] * len(batches))[k]
                config = BuildConfig(name=f"b{k}", base_model=model, mode=mode, max_length=1024, val_share=VAL,
                                     test_share=share, replay=0.3, filters=Filters(near_duplicate=0.0),
                                     learned_from=None if trained is None else [h.names[j] for j in sorted(trained)
                                                                                if j < k])
                out = Path(home) / "work" / f"b{k}"
                builder.build(store, config, renderer, out)
                ds = Registry(store).register(out, sha256_file(out / M.MANIFEST)).dataset
                seen = {u.id for m in h.manifests for u in m.sessions}
                h.names.append(ds.name)
                h.manifests.append(M.read(Path(ds.path)))
                h.heldout.append(Registry(store).heldout(model))
                h.new.append({u.id for u in h.manifests[-1].sessions} - seen)
                h.folders.append(Path(ds.path))
            check(h, shares)
            then(h)
        finally:
            store.close()


def sessions_in(folder: Path, split: str) -> set[str]:
    return {r["session_id"] for r in records(folder, split)}


def check(h: History, shares: list[float]) -> None:
    first_split: dict[str, str] = {}
    for k, (man, folder) in enumerate(zip(h.manifests, h.folders)):
        added = set(man.heldout_added)
        expected = {sid for sid in h.new[k] if split_of(sid, VAL, shares[k]) == "test"}
        assert added == expected, f"build {k}: holds out exactly the test share ({shares[k]}) of its new sessions"
        assert h.heldout[k] == (h.heldout[k - 1] if k else frozenset()) | added  # only grows, by what it added
        assert man.heldout_sessions == len(h.heldout[k])
        test = records(folder, "test")
        assert {r["session_id"] for r in test} == h.heldout[k], f"build {k}: its test split is the whole set"
        assert all(r["heldout_by"] == h.names[next(j for j in range(k + 1) if r["session_id"] in h.heldout[j])]
                   for r in test)  # provenance: the build that held the session out
        if k:
            before = {r["id"]: r for r in records(h.folders[k - 1], "test")}
            now = {r["id"]: r for r in test}
            assert before.keys() <= now.keys() and all(now[i] == before[i] for i in before)  # same examples kept
        for use in man.sessions:
            assert first_split.setdefault(use.id, use.split) == use.split, f"{use.id} changed split in build {k}"
    final = h.heldout[-1]
    for folder in h.folders:
        for split in ("train", "val"):
            assert not sessions_in(folder, split) & final, f"a held-out session in {folder.name}/{split}"


@settings(max_examples=10, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.integers(1, 5), min_size=5, max_size=5),
       shares=st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.45]), min_size=5, max_size=5),
       modes=st.lists(st.sampled_from(["auto", "full"]), min_size=5, max_size=5),
       learned=st.lists(st.none() | st.sets(st.integers(0, 3)), min_size=5, max_size=5))
def test_the_heldout_set_grows_by_a_share_of_new_sessions_and_is_never_trained_on(renderer, tiny_model, batches,
                                                                                  shares, modes, learned):
    """Whichever earlier builds count as trained on (a cycle's build takes again what a person's dataset used)."""
    run_builds(renderer, str(tiny_model), batches, shares, modes, learned=learned)


def test_a_second_build_holds_out_a_share_of_its_new_sessions_and_evaluation_follows(renderer, tiny_model):
    def then(h: History) -> None:
        assert h.manifests[1].mode == "incremental" and h.manifests[1].heldout_added  # the second build added some
        assert h.manifests[1].heldout_from == {"b0": len(records(h.folders[0], "test"))}  # the rest read back
        checked, problems = validate_folder(h.folders[1], h.heldout[1])
        assert checked and not problems

    # session ids hash the file's path (a fresh folder each run): 20 and 30 sessions make "none held out" a
    # 1-in-100 000 chance
    run_builds(renderer, str(tiny_model), [20, 30], [0.45, 0.3], ["auto", "auto"], then)


def test_a_cycle_build_takes_again_what_only_an_untrained_dataset_used(renderer, tiny_model):
    """learned_from (what the school's cycles trained on): the sessions a person's dataset put in train/val, never
    trained on, are built again (same split); its held-out sessions stay held out (read back, not rendered); what a
    trained dataset used is left out, and with nothing else new the build says so."""
    def then(h: History) -> None:
        by_hand, cycle = h.manifests[0], h.manifests[1]
        reused = {u.id for u in by_hand.sessions if u.split != "test"}
        assert reused and reused <= {u.id for u in cycle.sessions}
        assert {u.id: u.split for u in cycle.sessions if u.id in reused} == \
            {u.id: u.split for u in by_hand.sessions if u.id in reused}
        held = {u.id for u in by_hand.sessions if u.split == "test"}
        assert not held & {u.id for u in cycle.sessions}  # read back from the person's dataset instead
        assert cycle.filters["already trained on or held out"] == len(held)
        assert "already in an earlier dataset" not in cycle.filters
        assert cycle.replayed_from == []  # nothing was trained on: nothing to replay
        out = Path(os.environ["NIGHTSCHOOL_HOME"]) / "work" / "again"
        config = BuildConfig(name="again", base_model=str(tiny_model), max_length=1024, val_share=VAL,
                             filters=Filters(near_duplicate=0.0), learned_from=["b1"])
        store = Store()
        try:
            with pytest.raises(builder.BuildError) as nothing:
                builder.build(store, config, renderer, out)
        finally:
            store.close()
        assert "Every session is already trained on or held out: capture more work." in str(nothing.value)
        assert "mode full" not in str(nothing.value)

    from app.core.base.store import Store

    run_builds(renderer, str(tiny_model), [12, 3], [0.45, 0.3], ["auto", "auto"], then, learned=[None, set()])
