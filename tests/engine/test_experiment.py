"""The experiment spec with real engines: dry run (valid and invalid), budgets the engine enforces, eval loss and
the best checkpoint, lineage in the result, a QLoRA request refused clearly on a machine without CUDA."""
from __future__ import annotations

import json
from pathlib import Path

from app.core.train import checkpoints as ckpt
from app.core.train.events import read_events
from app.core.train.spec import Budget, JobSpec
from tests.conftest import fast_hyper, write_jsonl
from tests.engine.helpers import of_type
from tests.tiny_model import chat_records


def _manager():
    from app.core.base.store import Store
    from app.core.train.jobs import JobManager

    return JobManager(Store())


def test_dry_run_validates_and_plans_without_training(tiny_model, tmp_path):
    manager = _manager()
    chat = write_jsonl(tmp_path / "chat.jsonl", chat_records(24))
    job = manager.submit(chat, model=str(tiny_model), hyper=fast_hyper(max_steps=500, epochs=2), dry_run=True)
    done = manager.wait(job.id, timeout=180)
    run_dir = Path(manager.latest_run(job.id).run_dir)
    assert done.state == "validated", done.error
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["ok"] and plan["examples"] == 24 and plan["steps"] == 12  # 2 epochs x 24/4, not 500
    assert plan["tokens"] > 24 * 2 * 10
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "adapter").exists()

    bad = manager.submit(chat, model=str(tiny_model), hyper=fast_hyper(method="qlora"), dry_run=True)
    refused = manager.wait(bad.id, timeout=180)
    assert refused.state == "failed" and "CUDA" in refused.error, refused.error


def test_qlora_without_cuda_fails_with_what_to_do(tiny_model, tmp_path):
    manager = _manager()
    chat = write_jsonl(tmp_path / "chat.jsonl", chat_records(8))
    job = manager.wait(manager.submit(chat, model=str(tiny_model), hyper=fast_hyper(method="qlora")).id, 180)
    assert job.state == "failed" and "QLoRA needs an NVIDIA GPU" in job.error and "lora" in job.error


def test_token_budget_stops_the_job_with_a_checkpoint(tiny_model, tmp_path):
    manager = _manager()
    chat = write_jsonl(tmp_path / "chat.jsonl", chat_records(24))
    job = manager.submit(chat, model=str(tiny_model), hyper=fast_hyper(max_steps=200, save_steps=100),
                         budget=Budget(max_tokens=1500))
    done = manager.wait(job.id, timeout=300)
    run_dir = Path(manager.latest_run(job.id).run_dir)
    assert done.state == "stopped", done.error
    result = json.loads((run_dir / "result.json").read_text())
    assert result["stop_reason"].startswith("budget:") and 0 < result["metrics"]["steps"] < 200
    assert result["metrics"]["tokens"] >= 1500
    alerts = [e.body for e in of_type(read_events(run_dir / "events.jsonl"), "alert")]
    assert [a.kind for a in alerts] == ["budget"]
    assert ckpt.latest_good(run_dir / "checkpoints").step == result["metrics"]["steps"]


def test_eval_loss_picks_the_best_checkpoint_and_lineage_is_recorded(tiny_model, tmp_path):
    manager = _manager()
    chat = write_jsonl(tmp_path / "chat.jsonl", chat_records(24))
    held = write_jsonl(tmp_path / "eval.jsonl", chat_records(8)[::-1])
    job = manager.submit(chat, model=str(tiny_model), eval_data=held,
                         hyper=fast_hyper(max_steps=24, save_steps=4, keep_checkpoints=2))
    done = manager.wait(job.id, timeout=300)
    run = manager.latest_run(job.id)
    run_dir = Path(run.run_dir)
    assert done.state == "completed", done.error
    events = read_events(run_dir / "events.jsonl")
    evals = [e.body for e in of_type(events, "metrics") if e.body.eval_loss is not None]
    assert [m.step for m in evals] == [4, 8, 12, 16, 20, 24]
    assert evals[-1].eval_loss < evals[0].eval_loss
    good = ckpt.scan(run_dir / "checkpoints")[0]
    best = min(evals, key=lambda m: m.eval_loss)
    assert {c.step for c in good} == {20, 24} | {best.step}  # retention: the last two and the best
    result = json.loads((run_dir / "result.json").read_text())
    assert result["best_checkpoint"].endswith(f"checkpoint-{best.step}")
    assert result["metrics"]["best_eval_loss"] == best.eval_loss

    spec, _ = JobSpec.read(run_dir / "spec.json")
    assert result["config_fingerprint"] == spec.lineage.config_fingerprint == spec.config_fingerprint()
    assert len(result["code_hash"]) == 64 and result["code_hash"] == spec.lineage.code_hash
    assert spec.lineage.dataset_fingerprint == spec.dataset_sha256
    other = spec.model_copy(update={"hyper": spec.hyper.model_copy(update={"learning_rate": 1e-3})})
    assert other.config_fingerprint() != spec.config_fingerprint()
