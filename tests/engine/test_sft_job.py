"""A real LoRA SFT job on a tiny model through the real engine subprocess and socket."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.train.events import read_events
from app.core.train.results import ResultRefused, validate
from app.core.train.spec import JobSpec
from tests.conftest import fast_hyper, write_jsonl
from tests.engine.helpers import of_type, states
from tests.tiny_model import chat_records


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model):
    """One real job shared by this module's checks: (manager, finished job)."""
    from app.core.base.store import Store
    from app.core.train.jobs import JobManager

    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NIGHTSCHOOL_HOME", str(home))
        chat = write_jsonl(home / "chat.jsonl", chat_records(24))
        manager = JobManager(Store())
        job = manager.submit(chat, model=str(tiny_model), hyper=fast_hyper())
        yield manager, manager.wait(job.id, timeout=300)


def test_loss_falls_adapter_saved_and_result_validates(trained, tiny_model):
    manager, finished_job = trained
    assert finished_job.state == "completed", finished_job.error
    run = manager.latest_run(finished_job.id)
    events = read_events(Path(run.run_dir) / "events.jsonl")
    losses = [e.body.loss for e in of_type(events, "metrics")]
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.1, losses
    assert states(events)[-1] == "completed"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))

    kinds = [c.kind for c in manager.checkpoints(finished_job.id)]
    assert kinds.count("checkpoint") == 3 and kinds[-1] == "adapter"
    result = json.loads(Path(run.run_dir, "result.json").read_text())
    assert result["metrics"]["steps"] == 30 and result["metrics"]["tokens_per_s"] > 0

    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    model = PeftModel.from_pretrained(base, result["adapter_path"])
    tok = AutoTokenizer.from_pretrained(result["adapter_path"])
    assert "{% generation %}" not in tok.chat_template  # saved with the model's own template
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of Spain?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]


@pytest.mark.parametrize("tamper", ["job_id", "adapter_bytes", "dataset", "metrics"])
def test_tampered_result_is_refused(trained, tamper):
    manager, finished_job = trained
    job = manager.job(finished_job.id)
    spec, _ = JobSpec.read(Path(job.spec_path))
    run_dir = Path(spec.run_dir)
    raw = json.loads((run_dir / "result.json").read_text())
    validate(raw, spec, job.spec_sha256)  # the genuine one passes
    if tamper == "job_id":
        raw["job_id"] = "someone-else"
    elif tamper == "adapter_bytes":
        weights = Path(raw["adapter_path"]) / "adapter_model.safetensors"
        genuine = weights.read_bytes()
        weights.write_bytes(genuine[:-8] + b"tampered")
        try:
            with pytest.raises(ResultRefused, match="adapter fingerprint"):
                validate(raw, spec, job.spec_sha256)
        finally:
            weights.write_bytes(genuine)
        return
    elif tamper == "dataset":
        raw["dataset_sha256"] = "0" * 64
    else:
        raw["metrics"]["last_loss"] = None
    with pytest.raises(ResultRefused):
        validate(raw, spec, job.spec_sha256)


def test_a_tampered_result_fails_the_run_and_registers_nothing(manager, chat_file, tiny_model):
    job = manager.submit(chat_file, model=str(tiny_model), hyper=fast_hyper(max_steps=10))
    run = manager.latest_run(job.id)
    manager._procs[job.id].wait(timeout=300)  # the engine is done; the manager has not looked yet
    result_file = Path(run.run_dir) / "result.json"
    data = json.loads(result_file.read_text())
    data["adapter_path"] = "/tmp/elsewhere"
    result_file.write_text(json.dumps(data))
    job = manager.finalise(job.id)
    assert job.state == "failed" and "result refused" in job.error and "outside the run dir" in job.error
    assert manager.checkpoints(job.id) == []

