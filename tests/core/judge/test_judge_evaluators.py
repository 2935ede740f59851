"""Two evaluators, one verdict: a checkpoint of the tiny model judged against its base through transformers (the
reference) and through llama.cpp (the model converted to an f16 GGUF by the worker, as a CPU cycle judges) gives the
same gate verdict, the same next-action outcomes nearly everywhere and the same loss; each evaluator's result is
cached apart. The f16 GGUF the llama.cpp evaluation converted is kept: a later evaluation of the same model and its
export use it instead of merging and converting again (engine/workers/gguf_cache.py)."""
from __future__ import annotations

import pytest

from app.core.judge import promote as J
from app.core.judge.evaluate import evaluator_for
from app.core.judge.gate import Thresholds
from app.core.judge.gguf import keyed
from app.core.judge.records import evals_of, of_job, set_thresholds
from app.core.judge.report import LOSSES, EvalSettings
from tests.conftest import fast_hyper, write_jsonl
from tests.core.judge.test_gguf_eval import CAPITALS, heldout_records

pytestmark = pytest.mark.slow


def train_records() -> list[dict]:
    """The capital answers the held-out set asks for, phrased as training sessions."""
    return [{"messages": [{"role": "user", "content": f"What is the capital of {c}?"},
                          {"role": "assistant", "content": f"The capital of {c} is {p}."}]} for c, p in CAPITALS] * 4


def test_transformers_and_llamacpp_give_the_same_verdict(store, manager, shippable_model, tmp_path):
    set_thresholds(store, Thresholds(min_examples=2, min_contexts=5))
    file = write_jsonl(tmp_path / "train.jsonl", train_records())
    job = manager.wait(manager.submit(file, model=str(shippable_model),
                                      hyper=fast_hyper(max_steps=20, learning_rate=5e-3)).id, timeout=600)
    assert job.state == "completed", job.error
    target = of_job(store, job.id)
    heldout = write_jsonl(tmp_path / "heldout.jsonl", heldout_records())
    judged = {}
    for evaluator in ("transformers", "llama.cpp"):
        settings = EvalSettings(max_contexts=16, max_new_tokens=32, evaluator=evaluator)
        judged[evaluator] = J.judge(store, target, file=str(heldout), settings=settings)
    hf, cpp = judged["transformers"], judged["llama.cpp"]
    assert hf.verdict.verdict == cpp.verdict.verdict, (hf.verdict.reasons, cpp.verdict.reasons)
    for name in ("candidate", "base"):
        h, c = hf.reports[name], cpp.reports[name]
        assert c.runtime == "gguf" and c.quant == "f16" and h.runtime != "gguf"
        assert c.metrics["loss"] == pytest.approx(h.metrics["loss"], rel=2e-3)
        assert c.metrics["agreement"] == pytest.approx(h.metrics["agreement"], abs=0.15)
    rows = {e: keyed(evals_of_row(store, j.row.eval_id)) for e, j in judged.items()}
    same = sum(rows["transformers"][k]["outcome"] == rows["llama.cpp"][k]["outcome"] for k in rows["transformers"])
    assert same >= 0.85 * len(rows["transformers"]), same
    losses = {e: keyed(evals_of_row(store, j.row.eval_id), LOSSES) for e, j in judged.items()}
    assert losses["transformers"].keys() == losses["llama.cpp"].keys()
    assert len(evals_of(store, target)) == 2  # one cached evaluation per evaluator
    assert evaluator_for("transformers") == "transformers" and evaluator_for("llama.cpp") == "llama.cpp"
    converted_once(store, target, tmp_path)


def converted_once(store, target, tmp_path):
    """The candidate's and the base's f16 GGUFs are in the cache: a second held-out set is judged from them, and the
    export quantizes the candidate's file (named as its export) instead of merging and converting it again."""
    import llama_cpp

    from app.core.base import paths
    from app.core.judge.evaluate import choose_set, evaluate
    from app.core.ship.exports import export

    assert len(list(paths.gguf_cache_dir().glob("*.f16.gguf"))) == 2
    logs = []

    def sink(env):
        if hasattr(env.body, "message"):
            logs.append(env.body.message)

    other = write_jsonl(tmp_path / "heldout-2.jsonl", heldout_records()[:-1])
    settings = EvalSettings(max_contexts=8, max_new_tokens=16, evaluator="llama.cpp")
    evaluate(store, target, choose_set(store, target, file=str(other)), settings, sink)
    assert any("comes from the cache" in m for m in logs) and not any("merging" in m for m in logs), logs
    logs.clear()
    made = export(store, target, quants=["q8_0"], lora=False, sink=sink)
    assert any("its llama.cpp evaluation converted is quantized" in m for m in logs), logs
    assert not any("merging" in m for m in logs), logs
    llm = llama_cpp.Llama(str(made.path("q8_0")), vocab_only=True, verbose=False)
    try:
        assert llm.metadata["general.name"] == target.file_stem
    finally:
        llm.close()
    assert len(list(paths.gguf_cache_dir().glob("*.f16.gguf"))) == 2  # the export took nothing from the cache


def evals_of_row(store, eval_id):
    from pathlib import Path

    from app.core.base.schema import EvalRow

    with store.session() as s:
        return Path(s.get(EvalRow, eval_id).report_path).parent
