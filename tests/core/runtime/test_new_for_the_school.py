"""What is new for the school: captured sessions no cycle of the base model has trained on (held-out and bad ones
aside) — a dataset a person built, trained on or not, does not lower the count; "Run now" with nothing new is refused
up front and records no cycle; a cycle that failed before training starts no cool-down, and the next automatic one
waits for a new session instead. Real store and real
captured sessions; the datasets are rows a build would have registered (the builds themselves are tested in
tests/core/datasets and tests/ui/test_school_panel.py)."""
from __future__ import annotations

import pytest

from app.core.base.schema import BuiltDataset, DatasetSession, HeldOut
from app.core.runtime.school import cycles
from app.core.runtime.school.policy import load
from app.core.runtime.school.facade import School, SchoolError
from app.core.runtime.school.triggers import new_sessions, nothing_to_learn, readiness
from tests.core.datasets.helpers import ingest, write_session


def registered(store, name: str, splits: dict[str, str]) -> None:
    """A built dataset of the default model as the registry records it: its sessions, their splits, the held-out."""
    with store.session() as s:
        row = BuiltDataset(name=name, kind="sft", base_model="default", fingerprint=name, spec_id="chat_sft_v1",
                           template_sha256="t", path=f"/nowhere/{name}", mode="full", manifest_json="{}")
        s.add(row)
        s.flush()
        s.add_all([DatasetSession(dataset_id=row.id, session_id=sid, split=split, content_sha256="c")
                   for sid, split in splits.items()])
        s.add_all([HeldOut(base_model="default", session_id=sid, dataset_id=row.id)
                   for sid, split in splits.items() if split == "test"])


def cooling(store) -> list[str]:
    return [r for r in readiness(store, load(store)).reasons if "cooling down" in r]


def roots(store) -> list[str]:
    from app.core.base.schema import AgentSession

    with store.session() as s:
        return [r.id for r in s.query(AgentSession).filter(AgentSession.parent_id.is_(None))]


def test_only_what_a_cycle_trained_on_stops_being_new(store, tmp_path):
    for i in range(3):
        write_session(tmp_path / "agent", i)
    ingest(store, tmp_path / "agent")
    first, held, third = sorted(roots(store))
    registered(store, "by-hand", {first: "train", held: "test", third: "val"})
    assert new_sessions(store, "default") == 2  # the person's dataset used them; no cycle trained on them
    assert nothing_to_learn(store, "default") == ""

    done = cycles.create(store, "default", "run now (test)", {})
    cycles.update(store, done.id, outputs={"building": {"dataset": "by-hand"}, "training": {"job": "j"}})
    cycles.finish(store, cycles.get(store, done.id), "refused", "the gate refused the candidate")
    assert cycles.learned_from(store, "default") == ["by-hand"]
    assert new_sessions(store, "default") == 0
    assert nothing_to_learn(store, "default").startswith("no captured session is new for the built-in SmolLM2")
    with pytest.raises(SchoolError) as refused:
        School(store).now("test")
    said = str(refused.value)
    assert said.startswith("nothing new to learn. No captured session is new for the built-in SmolLM2"), said
    assert [c.id for c in cycles.history(store)] == [done.id]  # no cycle recorded


def test_a_cycle_that_fails_before_training_starts_no_cooldown(store):
    School(store).set_policy("cooldown_min", 60)
    early = cycles.begin_stage(store, cycles.create(store, "default", "run now (test)", {}), "building")[0]
    cycles.finish(store, early, "failed", "the dataset build failed: no examples to build")
    assert cooling(store) == []

    late = cycles.begin_stage(store, cycles.create(store, "default", "run now (test)", {}), "building")[0]
    late = cycles.begin_stage(store, cycles.end_stage(store, late, "building", {"dataset": "d"}), "training")[0]
    cycles.finish(store, late, "failed", "the training job failed")
    assert len(cooling(store)) == 1 and f"after cycle {late.id}" in cooling(store)[0]


def test_after_a_cycle_failed_before_training_the_next_waits_for_new_sessions(store, tmp_path):
    """No cool-down, and no cycle every few seconds failing the same way either: the next automatic one waits until
    more sessions are new than the failed one started with."""
    school = School(store)
    for key, value in {"min_sessions": 1, "window": "any", "max_load": 1000, "on_battery": True}.items():
        school.set_policy(key, value)
    write_session(tmp_path / "agent", 0)
    ingest(store, tmp_path / "agent")
    assert readiness(store, load(store)).ready
    failed = cycles.begin_stage(store, cycles.create(store, "default", "1 new usable sessions", {"new_sessions": 1}),
                                "building")[0]
    cycles.finish(store, failed, "failed", "the dataset build failed: no examples to build")
    waits = readiness(store, load(store)).reasons
    assert waits == [f"cycle {failed.id} failed at building and no new session came since: the next starts when one "
                     "comes (or run one now)"], waits
    write_session(tmp_path / "agent", 1)
    ingest(store, tmp_path / "agent")
    assert readiness(store, load(store)).ready
