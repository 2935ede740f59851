"""The gate on the real SmolLM2-135M-Instruct, with its default (statistical) thresholds: a noise-level checkpoint (3
steps at batch 1, small learning rate) is inconclusive and not promoted; one SFT cycle on captured sessions passes
against the base model on the frozen held-out split with its intervals shown and is promoted; a cycle trained on
shuffled targets (every assistant message moved to another example's slot) fails against the deployed model with the
reasons in words, and what is deployed does not change. Judged through llama.cpp, as a cycle on a CPU judges."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from app.core.judge import promote as J
from app.core.judge.deployment import deployed
from app.core.judge.records import resolve
from app.core.judge.report import EvalSettings
from app.core.train.spec import Hyper
from tests.conftest import write_jsonl
from tests.core.datasets.helpers import records
from tests.core.judge.conftest import build_heldout, builder_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2700)]  # three SmolLM2 trainings (one of 3 steps), 4 evaluations
# Stored session ids (so their stable-hash splits) depend on the files' paths: at 45 % of 80 sessions about 36 are held
# out (sd 4.4), at least the gate's 20 loss examples in any run (at 30 % a CI run held out 15)
SESSIONS, TEST_SHARE = 80, 0.45
# judged as a cycle judges on a CPU: through llama.cpp on the f16 GGUF (minutes instead of ten: the suite's budget)
SETTINGS = EvalSettings(max_contexts=20, max_new_tokens=64, max_examples=24, samples=4, evaluator="llama.cpp")
HYPER = Hyper(max_steps=10, epochs=100, batch_size=4, grad_accum=1, warmup=0.0, learning_rate=1e-3, max_length=512,
              save_steps=100, lora_r=16, lora_alpha=32)
# A checkpoint that barely moved: 3 steps at batch 1 with a small learning rate (at HYPER's 1e-3 the same 3 steps cut
# SmolLM2's held-out loss by 32 %: a real change, not noise)
NOISE = HYPER.model_copy(update={"max_steps": 3, "batch_size": 1, "learning_rate": 1e-5})


def shuffled_targets(folder: Path, out: Path, seed: int = 0) -> Path:
    """The train split with every assistant message moved to another example's slot: same text, wrong places."""
    recs = [{"messages": r["messages"]} for r in records(folder, "train")]
    slots = [(i, j) for i, r in enumerate(recs) for j, m in enumerate(r["messages"]) if m["role"] == "assistant"]
    moved = [recs[i]["messages"][j] for i, j in slots]
    random.Random(seed).shuffle(moved)
    for (i, j), msg in zip(slots, moved):
        recs[i]["messages"][j] = msg
    return write_jsonl(out, recs)


def train(manager, file, model, hyper: Hyper = HYPER) -> str:
    job = manager.wait(manager.submit(file, model=str(model), hyper=hyper).id, timeout=1500)
    assert job.state == "completed", job.error
    return job.id


def test_noise_is_inconclusive_a_real_cycle_passes_and_shuffled_targets_fail(store, manager, agent_dir,
                                                                            smollm2_folder, tmp_path):
    ds = build_heldout(store, agent_dir, builder_for(store, smollm2_folder), sessions=SESSIONS, test_share=TEST_SHARE)
    noise = train(manager, Path(ds.path) / "train.jsonl", smollm2_folder, NOISE)
    unsure, none = J.promote(store, resolve(store, noise), settings=SETTINGS)
    print("\nnoise", unsure.reports["candidate"].metrics, "\n", unsure.verdict.reasons)
    assert unsure.verdict.verdict == "inconclusive" and none is None, unsure.verdict.reasons
    assert deployed(store, str(smollm2_folder)) is None  # nothing was promoted
    loss = next(c for c in unsure.verdict.checks if c.metric == "loss")
    assert loss.n >= 20 and "95 % CI" in loss.text and f", {loss.n} examples) vs the base model: " in loss.text
    assert loss.status != "improved" and any("no primary metric" in n for n in unsure.verdict.notes)

    good = train(manager, Path(ds.path) / "train.jsonl", smollm2_folder)
    judged, promoted = J.promote(store, resolve(store, good), settings=SETTINGS)
    base, cand = judged.reports["base"].metrics, judged.reports["candidate"].metrics
    print("\nbase", base, "\ngood", cand, "\n", judged.verdict.reasons)
    assert judged.verdict.verdict == "pass", judged.verdict.reasons
    assert cand["loss"] < base["loss"] and cand["agreement"] > base["agreement"]
    assert promoted is not None
    improved = [c for c in judged.verdict.checks if c.status == "improved"]
    assert improved and all("95 % CI" in c.text and c.text.endswith("vs the base model: improved") for c in improved)
    assert all((c.high < 0 if c.metric == "loss" else c.low > 0) for c in improved)  # the interval excludes zero

    bad = train(manager, shuffled_targets(Path(ds.path), tmp_path / "shuffled.jsonl"), smollm2_folder)
    refused, none = J.promote(store, resolve(store, bad), settings=SETTINGS)
    print("bad", refused.reports["candidate"].metrics, "\n", refused.verdict.reasons)
    assert none is None and refused.verdict.verdict == "fail"
    failed = [c for c in refused.verdict.checks if not c.ok]
    assert any(c.against == "deployed" and c.metric in ("loss", "agreement") for c in failed), refused.verdict.reasons
    assert all(("vs the" in r) for r in refused.verdict.reasons)
    assert all("95 % CI" in c.text for c in failed if c.status != "missing")
    assert deployed(store, str(smollm2_folder)).checkpoint_id == judged.target.id
