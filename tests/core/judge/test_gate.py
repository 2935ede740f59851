"""The gate's verdict rules on hand-made per-example evidence: a noise-level change is inconclusive, a clear gain
passes with its interval shown, a significant fall fails while a point estimate beyond the 15 % bound whose interval
reaches zero is only said (a check with no interval still fails on it), null data never passes, and incomparable or
too little evidence is inconclusive; old stored thresholds still load."""
from __future__ import annotations

import random

from app.core.judge.evidence import Evidence
from app.core.judge.gate import Thresholds, judge
from app.core.judge.report import EvalReport, composite

TOKENS = 40


def evidence(per_token: list[float], agree: list[bool], label="cand", sha="s" * 64, base_model="default",
             valid: list[int] | None = None, reward: list[float] | None = None,
             sessions: tuple[list[str], list[str]] | None = None) -> Evidence:
    """A model's evaluation from its per-example rows; the report's metrics are what the rows sum to. `sessions`:
    the session of each loss example and of each next action (None: rows written before they named one)."""
    valid = valid if valid is not None else [1] * len(agree)
    reward = reward if reward is not None else [0.5] * len(agree)
    of_loss, of_action = sessions or ([], [])
    named = (lambda names, i: {"session_id": names[i]} if names else {})
    losses = {f"e{i:03d}": {"key": f"e{i:03d}", **named(of_loss, i), "nll": x * TOKENS, "tokens": TOKENS}
              for i, x in enumerate(per_token)}
    actions = {f"c{i:03d}": {"key": f"c{i:03d}", **named(of_action, i), "outcome": "agree" if a else "other_tool",
                             "attempted": 1, "valid": v, "reward": r}
               for i, (a, v, r) in enumerate(zip(agree, valid, reward))}
    metrics = {"loss": sum(per_token) / len(per_token) if per_token else None,
               "agreement": sum(agree) / len(agree), "validity": sum(valid) / len(valid),
               "reward": sum(reward) / len(reward)}
    report = EvalReport(label=label, base_model=base_model, eval_set="d/test", eval_set_sha256=sha,
                        contexts=len(agree), examples=len(per_token), metrics=metrics)
    return Evidence(report, losses, actions)


def base_losses(n=24, seed=0) -> list[float]:
    rng = random.Random(seed)
    return [rng.uniform(1.2, 2.8) for _ in range(n)]


def agreements(n: int, yes: set[int]) -> list[bool]:
    return [i in yes for i in range(n)]


def shifted(values: list[float], factor: float, noise: float, seed=1) -> list[float]:
    rng = random.Random(seed)
    return [v * factor * (1 + rng.gauss(0, noise)) for v in values]


BASE = base_losses()
BASE_AGREE = agreements(28, {3, 17})  # 2 of 28


def test_a_noise_level_change_is_inconclusive_and_says_why_with_intervals():
    """The deployed-by-mistake case: loss −1 % and agreement unchanged at 2 of 28."""
    cand = evidence(shifted(BASE, 0.99, 0.003), agreements(28, {3, 17}))
    v = judge(cand, evidence(BASE, BASE_AGREE, "base"))
    assert v.verdict == "inconclusive", v.reasons
    loss = next(c for c in v.checks if c.metric == "loss")
    assert loss.status == "below_minimum" and loss.high < 0 and loss.n == 24
    assert loss.text.startswith("held-out loss ") and "(−1.0 %, 95 % CI −" in loss.text
    assert loss.text.endswith(", 24 examples) vs the base model: below the 2 % minimum"), loss.text
    agree = next(c for c in v.checks if c.metric == "agreement")
    assert (agree.gained, agree.lost, agree.p_value, agree.status) == (0, 0, 1.0, "inconclusive")
    assert "agreement 0.071 → 0.071 (+0 of 28 actions: 0 gained, 0 lost, McNemar p 1.000, 95 % CI" in agree.text
    assert any("no primary metric (loss, agreement) improved significantly" in n for n in v.notes)
    assert v.summary().startswith("INCONCLUSIVE: ")


def test_a_clear_gain_passes_with_its_interval_and_counts():
    cand = evidence(shifted(BASE, 0.85, 0.02), agreements(28, {3, 17, 1, 2, 5, 8, 9, 11, 13, 20}))
    v = judge(cand, evidence(BASE, BASE_AGREE, "base"))
    assert v.verdict == "pass", v.reasons
    loss = next(c for c in v.checks if c.metric == "loss")
    assert loss.status == "improved" and loss.high < -0.02 and "95 % CI −" in loss.text
    assert loss.text.endswith("vs the base model: improved")
    agree = next(c for c in v.checks if c.metric == "agreement")
    assert (agree.gained, agree.lost, agree.n) == (8, 0, 28) and agree.p_value < 0.01 and agree.low > 0
    assert "(+8 of 28 actions: 8 gained, 0 lost, McNemar p 0.008" in agree.text and agree.status == "improved"


def test_agreement_alone_can_pass_when_the_loss_holds():
    gained = agreements(28, {3, 17, *range(5, 15)})
    v = judge(evidence(shifted(BASE, 1.0, 0.01), gained), evidence(BASE, BASE_AGREE, "base"))
    assert v.verdict == "pass", v.reasons
    assert {c.metric: c.status for c in v.checks}["loss"] == "inconclusive"


def test_a_significantly_worse_loss_fails():
    v = judge(evidence(shifted(BASE, 1.08, 0.01), BASE_AGREE), evidence(BASE, BASE_AGREE, "base"))
    assert v.verdict == "fail"
    [failed] = [c for c in v.checks if not c.ok]
    assert failed.metric == "loss" and failed.status == "worse" and failed.low > 0
    assert failed.text.endswith("vs the base model: significantly worse") and v.reasons[0] == failed.text


def test_a_significant_fall_in_agreement_fails_even_when_the_loss_improved():
    base = evidence(BASE, agreements(28, set(range(12))), "base")
    cand = evidence(shifted(BASE, 0.8, 0.01), agreements(28, {0, 1}))
    v = judge(cand, base)
    assert v.verdict == "fail"
    [failed] = [c for c in v.checks if not c.ok]
    assert failed.metric == "agreement" and failed.lost == 10 and failed.p_value < 0.01
    assert failed.status == "worse" and failed.high < 0  # 12 → 2 of 28: significant, not only far beyond 15 %


def validity_drop() -> tuple[list[int], list[int]]:
    """A bench run's case: validity 0.679 → 0.571 (−16 %) over 28 next actions, 7 lost and 4 gained, in 7 sessions."""
    base = [1] * 19 + [0] * 9
    cand = [0] * 7 + [1] * 12 + [1] * 4 + [0] * 5
    return base, cand


SEVEN = ([f"s{i // 3}" for i in range(24)], [f"s{i // 4}" for i in range(28)])  # 8 and 7 held-out sessions


def test_a_point_drop_beyond_15_percent_whose_interval_reaches_zero_is_said_not_failed():
    """Issue 39: loss −10 % (its interval excludes zero) with validity 0.679 → 0.571, CI across zero: a pass, and
    the validity check says it is worse on the point estimate, not significantly, with its interval."""
    base_valid, cand_valid = validity_drop()
    cand = evidence(shifted(BASE, 0.9, 0.02), BASE_AGREE, valid=cand_valid, sessions=SEVEN)
    v = judge(cand, evidence(BASE, BASE_AGREE, "base", valid=base_valid, sessions=SEVEN))
    assert v.verdict == "pass", v.reasons
    validity = next(c for c in v.checks if c.metric == "validity")
    assert validity.ok and validity.status == "point_worse" and validity.low < 0 < validity.high
    assert validity.text.startswith("tool-call validity 0.679 → 0.571 (−0.107, 95 % CI −"), validity.text
    assert validity.text.endswith("over 7 sessions, 28 actions) vs the base model: worse by 16 % on the point "
                                  "estimate (beyond the 15 % bound), not significantly: its interval reaches zero")
    assert validity.text in v.summary()  # named in the promotion's note too, though it passed


def test_a_significant_validity_fall_fails_even_when_the_loss_improved():
    base_valid = [1] * 36 + [0] * 4  # 0.9 → 0.5, every one of the 10 sessions losing two of its four
    cand_valid = [0 if i % 4 < 2 else v for i, v in enumerate(base_valid)]
    sessions = ([f"s{i // 3}" for i in range(24)], [f"s{i // 4}" for i in range(40)])
    cand = evidence(shifted(BASE, 0.85, 0.02), agreements(40, {3, 17, *range(20, 32)}), valid=cand_valid,
                    sessions=sessions)
    v = judge(cand, evidence(BASE, agreements(40, {3, 17}), "base", valid=base_valid, sessions=sessions))
    assert v.verdict == "fail", v.reasons
    [failed] = [c for c in v.checks if not c.ok]
    assert failed.metric == "validity" and failed.status == "worse" and failed.high < 0 and failed.sessions == 10
    assert failed.text.endswith("vs the base model: significantly worse") and v.reasons[0] == failed.text


def test_without_an_interval_a_point_drop_beyond_15_percent_still_fails():
    """Evidence from one session has no interval to weigh: the bound is what is left, fail-closed."""
    base_valid, cand_valid = validity_drop()
    one = (["only"] * 24, ["only"] * 28)
    cand = evidence(shifted(BASE, 0.85, 0.02), BASE_AGREE, valid=cand_valid, sessions=one)
    v = judge(cand, evidence(BASE, BASE_AGREE, "base", valid=base_valid, sessions=one))
    failed = {c.metric: c for c in v.checks if not c.ok}
    assert v.verdict == "fail" and set(failed) == {"validity"} and failed["validity"].status == "regressed"
    assert failed["validity"].text.endswith("worse by more than 15%, with no interval to weigh it")


def null_pair(seed: int, sessions: int = 8, per: int = 6) -> tuple[Evidence, Evidence]:
    """The same model twice: each session has its own agreement and validity rate, both evaluations draw from it,
    and the candidate's loss is the base's with zero-mean noise per example."""
    rng = random.Random(seed)
    n = sessions * per
    names = [f"s{i // per}" for i in range(n)]
    base_loss = [rng.uniform(1.2, 2.8) for _ in range(n)]
    cand_loss = [v * (1 + rng.gauss(0, 0.05)) for v in base_loss]
    p_agree = [rng.uniform(0.1, 0.5) for _ in range(sessions)]
    p_valid = [rng.uniform(0.4, 0.9) for _ in range(sessions)]

    def draw(rates: list[float]) -> list[bool]:
        return [rng.random() < rates[i // per] for i in range(n)]
    base = evidence(base_loss, draw(p_agree), "base", valid=[int(x) for x in draw(p_valid)], sessions=(names, names))
    cand = evidence(cand_loss, draw(p_agree), valid=[int(x) for x in draw(p_valid)], sessions=(names, names))
    return cand, base


def test_null_data_never_passes():
    """R7: a noise checkpoint is never deployed. 60 null trials: none passes, though in some a metric's point
    estimate falls beyond 15 % (said, not failed) — no significant primary gain, so inconclusive (or a chance
    significant fall: fail)."""
    th = Thresholds(resamples=500)
    judged = [judge(*null_pair(seed), thresholds=th) for seed in range(60)]
    assert not [v for v in judged if v.verdict == "pass"]
    assert sum(v.verdict == "inconclusive" for v in judged) >= 50
    said = [c for v in judged for c in v.checks if c.status == "point_worse"]
    assert {c.metric for c in said} >= {"agreement", "validity"} and all(c.ok for c in said)


def test_the_tolerance_lets_a_small_significant_fall_pass():
    valid = [0 if i < 5 else 1 for i in range(40)]  # validity 1.0 → 0.875: significant, within 15 %
    cand = evidence(shifted(BASE, 0.85, 0.02), agreements(40, {3, 17, *range(20, 32)}), valid=valid)
    base = evidence(BASE, agreements(40, {3, 17}), "base")
    strict = judge(cand, base, thresholds=Thresholds(resamples=500))
    assert strict.verdict == "fail" and [c.status for c in strict.checks if not c.ok] == ["worse"]
    assert judge(cand, base, thresholds=Thresholds(resamples=500, fall_tolerance=0.1)).verdict == "pass"


def test_the_deployed_model_is_a_second_bar():
    base = evidence(BASE, BASE_AGREE, "base")
    deployed = evidence(shifted(BASE, 0.8, 0.01, seed=5), agreements(28, {3, 17, *range(5, 12)}), "deployed")
    as_good = evidence(shifted(BASE, 0.8, 0.01, seed=6), agreements(28, {3, 17, *range(5, 12)}))
    v = judge(as_good, base, deployed)
    assert v.verdict == "inconclusive", v.reasons  # better than the base, not than what is deployed
    assert any("vs the deployed model" in n for n in v.notes) and all(c.ok for c in v.checks)
    worse = evidence(shifted(BASE, 0.9, 0.01, seed=7), agreements(28, {3, 17, *range(5, 12)}))
    v = judge(worse, base, deployed)
    assert v.verdict == "fail" and all(c.against == "deployed" for c in v.checks if not c.ok)


def test_too_little_or_incomparable_evidence_is_inconclusive():
    small = judge(evidence(shifted(BASE[:10], 0.5, 0.01), agreements(10, set(range(8)))),
                  evidence(BASE[:10], agreements(10, set()), "base"))
    assert small.verdict == "inconclusive"
    assert any("only 10 held-out loss examples" in n and "at least 20" in n for n in small.notes), small.notes
    assert any("only 10 held-out next actions" in n for n in small.notes)
    good = evidence(shifted(BASE, 0.85, 0.02), BASE_AGREE)
    v = judge(good, evidence(BASE, BASE_AGREE, "base", sha="t" * 64))
    assert v.verdict == "inconclusive" and "another held-out set" in v.notes[0] and not v.checks
    v = judge(good, evidence(BASE, BASE_AGREE, "base", base_model="other"))
    assert v.verdict == "inconclusive" and "another base model" in v.notes[0]
    old = evidence(BASE, BASE_AGREE, "base")
    old.losses = {}  # an evaluation from before the per-example files
    assert "no per-example results" in judge(good, old).notes[0]
    assert judge(good, None).verdict == "inconclusive"


def test_a_candidate_that_lost_a_metric_fails():
    cand = evidence(shifted(BASE, 0.85, 0.02), BASE_AGREE)
    cand.report.metrics["validity"] = None
    v = judge(cand, evidence(BASE, BASE_AGREE, "base"))
    assert v.verdict == "fail" and any("the candidate none" in r for r in v.reasons)


def test_old_stored_thresholds_load_with_the_new_defaults():
    old = ('{"loss_must_improve": true, "min_loss_gain": 0.0, "must_not_fall": ["agreement", "validity"], '
           '"fall_tolerance": 0.03, "max_regression": 0.2, "min_contexts": 5}')
    th = Thresholds.model_validate_json(old)
    assert (th.fall_tolerance, th.max_regression, th.min_contexts, th.min_gain["loss"]) == (0.03, 0.2, 20, 0.02)
    chosen = Thresholds.model_validate_json('{"min_loss_gain": 0.1, "min_contexts": 40}')
    assert chosen.min_gain["loss"] == 0.1 and chosen.min_contexts == 40
    now = Thresholds(min_examples=30, resamples=500)
    assert (now.min_examples, now.resamples) == (30, 500)
    assert Thresholds.model_validate_json(now.model_dump_json()) == now
    assert Thresholds.model_validate({"min_contexts": 8, "unknown": 1}).min_contexts == 8  # unknown keys: ignored


def test_composite_ranks_a_better_model_higher():
    assert composite({"loss": 1.0, "agreement": 0.6}) > composite({"loss": 2.0, "agreement": 0.4})
    assert 0.0 <= composite({"loss": None}) <= 1.0


def test_thresholds_live_in_the_settings_and_an_old_stored_value_still_loads(store):
    from app.core.base import settings
    from app.core.judge.records import set_thresholds, thresholds

    assert thresholds(store) == Thresholds()
    settings.put(store, "gate", {"loss_must_improve": True, "min_loss_gain": 0.0, "must_not_fall": ["agreement"],
                                 "fall_tolerance": 0.0, "max_regression": 0.15, "min_contexts": 5})
    assert thresholds(store) == Thresholds()  # the old defaults give way to the new ones
    set_thresholds(store, Thresholds(min_examples=8, confidence=0.9))
    assert (thresholds(store).min_examples, thresholds(store).confidence) == (8, 0.9)


def chatty_session(named: bool) -> tuple[Evidence, Evidence]:
    """The issue's lumpy evidence: 90 next actions from 3 held-out sessions; every gain is one chatty session's
    (its 30 near-alike actions all go from other_tool to agree), the other two sessions are unchanged. The loss
    holds. `named`: the rows name their sessions (else they are evidence written before)."""
    rng = random.Random(3)
    quiet = [rng.random() < 0.4 for _ in range(60)]
    base_agree, cand_agree = [False] * 30 + quiet, [True] * 30 + quiet
    sessions = (["chatty", "quiet-1", "quiet-2"] * 8, ["chatty"] * 30 + ["quiet-1"] * 30 + ["quiet-2"] * 30)
    sessions = sessions if named else None
    return (evidence(BASE, cand_agree, sessions=sessions),
            evidence(BASE, base_agree, "base", sessions=sessions))


def test_one_chatty_session_passes_per_action_but_not_at_the_session_level():
    """The must-show of issue 24 (5): the old per-action interval excludes zero and the candidate would pass; the
    session-level interval over the 3 sessions does not, and the verdict is inconclusive."""
    old = judge(*chatty_session(named=False))
    agree = next(c for c in old.checks if c.metric == "agreement")
    assert old.verdict == "pass" and agree.low > 0 and agree.sessions is None, old.reasons
    assert "95 % CI +0.2" in agree.text and "per action (the evidence names no sessions)" in agree.text, agree.text
    new = judge(*chatty_session(named=True))
    agree = next(c for c in new.checks if c.metric == "agreement")
    assert new.verdict == "inconclusive" and agree.status == "inconclusive" and agree.low <= 0 < agree.high
    assert (agree.gained, agree.lost, agree.n, agree.sessions) == (30, 0, 90, 3)
    assert "95 % CI −0.563…+1.000 over 3 sessions" in agree.text, agree.text  # widened for 3 sessions, within ±1
    loss = next(c for c in new.checks if c.metric == "loss")
    assert loss.sessions == 3 and "over 3 sessions, 24 examples)" in loss.text, loss.text


def test_evidence_from_one_session_has_no_interval_and_is_inconclusive():
    one = (["only"] * 24, ["only"] * 28)
    cand = evidence(shifted(BASE, 0.85, 0.02), agreements(28, {3, 17, *range(5, 15)}), sessions=one)
    v = judge(cand, evidence(BASE, BASE_AGREE, "base", sessions=one))
    assert v.verdict == "inconclusive", v.reasons
    assert all(c.low is None and c.sessions == 1 for c in v.checks)
    assert "no interval across sessions: all from one session" in v.checks[0].text
    assert any("all 28 paired held-out actions vs the base model come from one session" in n for n in v.notes)
