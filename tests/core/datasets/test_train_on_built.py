"""A built dataset trains: its train split goes through the SFT job on the model it was rendered for, loss falls."""
from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import fast_hyper
from tests.core.datasets.helpers import ingest, write_session


def test_an_sft_job_trains_on_a_built_dataset(store, manager, agent_dir, build, tiny_model):
    for i in range(8):
        write_session(agent_dir, i)
    ingest(store, agent_dir)
    outcome, ds = build(name="for-training", mode="full", max_length=512, val_share=0.0, test_share=0.0)
    assert outcome.ok, outcome.message
    job = manager.submit(Path(ds.path) / "train.jsonl", model=str(tiny_model), hyper=fast_hyper(max_length=512))
    assert job.records == ds.train
    job = manager.wait(job.id, timeout=600)
    assert job.state == "completed", job.error
    events = [json.loads(line) for line in (Path(manager.latest_run(job.id).run_dir) / "events.jsonl").open()]
    losses = [e["body"]["loss"] for e in events if e["type"] == "metrics"]
    logs = [e["body"]["message"] for e in events if e["type"] == "log"]
    assert "training on the dataset's stored tokens and assistant masks" in logs  # not re-rendered
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5, losses
