"""The gate's verdicts on hand-made reports: pass, fail with reasons in words, the 15 % regression rule, and
compare_only when the numbers cannot be compared."""
from __future__ import annotations

from app.core.judge.gate import Thresholds, judge
from app.core.judge.report import EvalReport, composite


def report(label="cand", sha="s" * 64, contexts=20, base_model="default", **metrics) -> EvalReport:
    values = {"loss": 2.0, "agreement": 0.4, "validity": 0.8, "reward": 0.5, **metrics}
    return EvalReport(label=label, base_model=base_model, eval_set="d/test", eval_set_sha256=sha, contexts=contexts,
                      metrics=values)


def test_a_better_checkpoint_passes_against_the_base():
    v = judge(report(loss=1.5, agreement=0.5, validity=0.9, reward=0.6), report("base"))
    assert v.verdict == "pass"
    assert any("held-out loss 2.000 → 1.500 (-25.0 %) vs the base model: improved" == r for r in v.reasons)


def test_a_loss_that_did_not_improve_fails_with_the_reason():
    v = judge(report(loss=2.1), report("base"))
    assert v.verdict == "fail"
    assert v.reasons[0].startswith("held-out loss 2.000 → 2.100") and "did not improve" in v.reasons[0]


def test_agreement_must_not_fall_and_validity_must_not_fall():
    v = judge(report(loss=1.0, agreement=0.35, validity=0.7), report("base"))
    failed = [c for c in v.checks if not c.ok]
    assert v.verdict == "fail"
    assert {c.metric for c in failed} == {"agreement", "validity"}
    assert all("fell (it must not fall)" in c.text or "regressed" in c.text for c in failed)


def test_the_tolerance_lets_a_small_fall_pass():
    v = judge(report(loss=1.0, agreement=0.38), report("base"), thresholds=Thresholds(fall_tolerance=0.05))
    assert v.verdict == "pass"


def test_a_metric_regressing_more_than_15_percent_fails_even_when_it_is_not_must_not_fall():
    v = judge(report(loss=1.0, reward=0.4), report("base"))  # reward 0.5 -> 0.4 = -20 %
    assert v.verdict == "fail"
    assert any("behavioural reward" in r and "regressed by more than 15%" in r for r in v.reasons)
    assert judge(report(loss=1.0, reward=0.45), report("base")).verdict == "pass"  # -10 %


def test_the_deployed_model_is_a_second_bar():
    base, deployed = report("base", loss=3.0, agreement=0.1), report("deployed", loss=1.2, agreement=0.6)
    v = judge(report(loss=2.0, agreement=0.4), base, deployed)
    assert v.verdict == "fail"
    assert all(c.against == "deployed" for c in v.checks if not c.ok)
    assert any("vs the deployed model" in r for r in v.reasons)


def test_another_held_out_set_or_base_model_is_compare_only():
    v = judge(report(loss=1.0), report("base", sha="t" * 64))
    assert v.verdict == "compare_only" and "another held-out set" in v.notes[0]
    v = judge(report(loss=1.0), report("base", base_model="other"))
    assert v.verdict == "compare_only" and "another base model" in v.notes[0]
    v = judge(report(loss=1.0, contexts=3), report("base", contexts=3))
    assert v.verdict == "compare_only" and "only 3 held-out next actions" in v.notes[0]
    assert judge(report(), None).verdict == "compare_only"


def test_a_candidate_that_lost_a_metric_fails():
    v = judge(report(loss=1.0, validity=None), report("base"))
    assert v.verdict == "fail" and any("the candidate none" in r for r in v.reasons)


def test_composite_ranks_a_better_model_higher():
    assert composite(report(loss=1.0, agreement=0.6).metrics) > composite(report().metrics)
    assert 0.0 <= composite({"loss": None}) <= 1.0
