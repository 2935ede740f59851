"""The registry's transitions are enforced by the store itself: a run is completed only after a checkpoint of it is
registered, and only a checkpoint with a passing verdict can be promoted (migration 0005's triggers)."""
from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError

from app.core.base.schema import CheckpointRow, EvalRow, Promotion, Run, VerdictRow
from app.core.judge.records import JudgeError, resolve


def a_run(store, manager, chat_file) -> int:
    job = manager.submit(chat_file, start=False)
    with store.session() as s:
        run = Run(job_id=job.id, run_dir="/x", socket_path="/x/s", state="running")
        s.add(run)
        s.flush()
        return run.id


def test_a_run_cannot_complete_before_its_checkpoint_is_registered(store, manager, chat_file, tmp_path):
    run_id = a_run(store, manager, chat_file)
    with pytest.raises(IntegrityError, match="only after its checkpoint is registered"):
        with store.session() as s:
            s.get(Run, run_id).state = "completed"
    with store.session() as s:
        s.add(CheckpointRow(run_id=run_id, step=3, kind="adapter", path=str(tmp_path)))
        s.flush()
        s.get(Run, run_id).state = "completed"
    with store.session() as s:
        assert s.get(Run, run_id).state == "completed"


def test_only_a_checkpoint_with_a_passing_verdict_can_be_promoted(store, manager, chat_file, tmp_path):
    run_id = a_run(store, manager, chat_file)
    with store.session() as s:
        ck = CheckpointRow(run_id=run_id, step=3, kind="adapter", path=str(tmp_path))
        s.add(ck)
        s.flush()
        ev = EvalRow(base_model="default", label="x", eval_set="t", eval_set_sha256="a" * 64,
                     settings_sha256="b" * 64, report_path="/r")
        s.add(ev)
        s.flush()
        failed = VerdictRow(checkpoint_id=ck.id, eval_id=ev.id, verdict="fail", reasons_json="[]",
                            thresholds_json="{}")
        s.add(failed)
        s.flush()
        ids = ck.id, ev.id, failed.id
    for verdict_id in (None, ids[2]):
        with pytest.raises(IntegrityError, match="only with a passing verdict"):
            with store.session() as s:
                s.add(Promotion(base_model="default", checkpoint_id=ids[0], verdict_id=verdict_id, action="promote"))
    with store.session() as s:
        passed = VerdictRow(checkpoint_id=ids[0], eval_id=ids[1], verdict="pass", reasons_json="[]",
                            thresholds_json="{}")
        s.add(passed)
        s.flush()
        s.add(Promotion(base_model="default", checkpoint_id=ids[0], verdict_id=passed.id, action="promote"))
    with store.session() as s:  # the base model itself (no checkpoint) needs no verdict: a rollback target
        s.add(Promotion(base_model="default", checkpoint_id=None, action="rollback"))


def test_an_unknown_reference_says_what_to_name(store):
    with pytest.raises(JudgeError, match="no registered checkpoint 'nope'") as err:
        resolve(store, "nope")
    assert "'base'" in str(err.value)
    assert resolve(store, "base:/m").base_model == "/m" and resolve(store, "base").is_base
