"""The refining stage for real: after an SFT job, the SFT student answers the new training contexts, its
disagreements with the teacher become preference pairs (the pairs worker), and a DPO job starts FROM the SFT adapter;
the stage hands back that job's checkpoint. The queue is ticked by a thread, as the runtime's loop ticks it."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.core.judge.records import resolve
from app.core.queue.scheduler import Queue
from app.core.runtime.school import cycles
from app.core.runtime.school import stages
from app.core.runtime.machinery.bus import Bus
from app.core.runtime.school.policy import Policy
from tests.conftest import fast_hyper
from tests.core.datasets.conftest import agent_dir  # noqa: F401 - fixtures shared with the dataset and judge tests
from tests.core.judge.conftest import agent_model, heldout_dataset  # noqa: F401

pytestmark = pytest.mark.slow


def test_refining_mines_pairs_with_the_sft_student_and_trains_dpo_on_top(store, manager, heldout_dataset,  # noqa: F811
                                                                       agent_model):  # noqa: F811
    ds = heldout_dataset
    sft = manager.wait(manager.submit(Path(ds.path) / "train.jsonl", model=str(agent_model),
                                      hyper=fast_hyper(max_length=512, max_steps=40)).id, timeout=900)
    assert sft.state == "completed", sft.error
    sft_target = resolve(store, sft.id)
    cycle = cycles.create(store, str(agent_model), "test", {})
    cycle = cycles.update(store, cycle.id, stage="refining", outputs={
        "building": {"dataset": ds.name}, "training": {"job": sft.id, "checkpoint": sft_target.id,
                                                       "adapter": sft_target.adapter}})
    queue, stop, bus = Queue(store), threading.Event(), Bus()

    def tick() -> None:
        while not stop.wait(0.5):
            queue.tick()

    ticking = threading.Thread(target=tick, daemon=True)
    ticking.start()
    try:
        policy = Policy(base_model=str(agent_model), hyper={"max_length": 512, "learning_rate": 5e-3,
                                                           "batch_size": 2, "grad_accum": 1}, max_steps=6)
        out = stages.refining(stages.Ctx(store, bus, policy, queue, stop), cycle)
    finally:
        stop.set()
        ticking.join(10)
    mined = cycles.get(store, cycle.id).outputs["mining"]
    assert mined["pairs"] > 0 and Path(mined["path"], "train.jsonl").is_file(), mined
    assert out.kind == "done", out.reason
    dpo = manager.job(out.output["job"])
    spec = resolve(store, dpo.id).spec
    assert spec.kind == "dpo" and spec.init_adapter == sft_target.adapter  # DPO on top of the SFT student
    assert dpo.source == f"cycle:{cycle.id}:refining" and out.output["checkpoint"] != sft_target.id
    planned = cycles.get(store, cycle.id).outputs["refining_plan"]  # the night's plan is the job's budget
    assert spec.budget.wall_clock_min == pytest.approx(planned["minutes"], abs=0.05) and planned["why"]
