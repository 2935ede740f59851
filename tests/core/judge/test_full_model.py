"""A fully fine-tuned model (the `full` recipe: a whole model folder, no adapter) is judged by both evaluators, exported
without a LoRA file, and continued by a full job only: a LoRA job cannot start from it (an adapter is always put on the
base model, so one trained on the full model would be judged and shipped without it)."""
from __future__ import annotations

import pytest

from app.core.judge import promote as J
from app.core.judge.records import of_job
from app.core.judge.report import EvalSettings
from app.core.ship.exports import export
from tests.conftest import fast_hyper, write_jsonl
from tests.core.judge.test_gguf_eval import heldout_records
from tests.core.judge.test_judge_evaluators import train_records

pytestmark = pytest.mark.slow


def test_a_full_fine_tune_is_judged_exported_and_continued_as_a_whole_model(store, manager, shippable_model,
                                                                            tmp_path):
    file = write_jsonl(tmp_path / "train.jsonl", train_records())
    job = manager.wait(manager.submit(file, model=str(shippable_model),
                                      hyper=fast_hyper(method="full", max_steps=6, learning_rate=5e-3)).id,
                       timeout=600)
    assert job.state == "completed", job.error
    target = of_job(store, job.id)
    heldout = str(write_jsonl(tmp_path / "heldout.jsonl", heldout_records()))
    for evaluator in ("llama.cpp", "transformers"):
        judged = J.judge(store, target, file=heldout,
                         settings=EvalSettings(max_contexts=8, max_new_tokens=16, evaluator=evaluator))
        candidate, base = judged.reports["candidate"], judged.reports["base"]
        assert candidate.contexts == base.contexts == 8
        # the trained weights were judged, not the base's: the held-out capitals it was trained on cost less
        assert candidate.metrics["loss"] < base.metrics["loss"] - 0.05, (evaluator, candidate.metrics, base.metrics)
    made = export(store, target, quants=["q8_0"], lora=True)
    assert [f["quant"] for f in made.files] == ["q8_0"] and not made.row.lora_file

    more = manager.wait(manager.submit(file, model=str(shippable_model), init_adapter=target.adapter,
                                       hyper=fast_hyper(max_steps=2)).id, timeout=600)
    assert more.state == "failed" and "cannot continue a fully fine-tuned model" in (more.error or "")
    full = manager.wait(manager.submit(file, model=str(shippable_model), init_adapter=target.adapter,
                                       hyper=fast_hyper(method="full", max_steps=2, learning_rate=5e-3)).id,
                        timeout=600)
    assert full.state == "completed", full.error
