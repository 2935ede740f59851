"""The gate's statistics against known cases: McNemar's exact p-values, a paired bootstrap that repeats with its seed,
covers the true difference on synthetic data about as often as it says, and pairs (shared difficulty cancels out)."""
from __future__ import annotations

import random
from math import comb

import pytest

from app.core.judge.stats import mcnemar_exact, paired_bootstrap, ratio, t_quantile, widening


def test_mcnemar_exact_known_tables():
    assert mcnemar_exact(1, 9) == pytest.approx(0.021484375)  # 2 · (1 + 10) / 2^10
    assert mcnemar_exact(9, 1) == mcnemar_exact(1, 9)
    assert mcnemar_exact(4, 4) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)  # all six discordant pairs one way
    assert mcnemar_exact(0, 5) > 0.05 > mcnemar_exact(0, 6)
    b, c = 7, 20  # against the binomial sum written out
    assert mcnemar_exact(b, c) == pytest.approx(2 * sum(comb(27, k) for k in range(8)) / 2 ** 27)


def test_ratio_of_sums():
    assert ratio([(3.0, 2.0), (1.0, 2.0)]) == 1.0
    assert ratio([(3.0, 2.0), (1.0, 2.0)], [0, 0]) == 1.5
    assert ratio([(0.0, 0.0)]) is None and ratio([(0.0, 0.0)], empty=0.0) == 0.0


def synthetic(rng: random.Random, n: int, shift: float) -> tuple[list, list]:
    """Paired examples whose difficulty varies a lot; the candidate's summed NLL is the reference's × (1 + shift) plus
    zero-mean noise, so the true relative change of the ratio statistic is `shift`."""
    before, after = [], []
    for _ in range(n):
        tokens = rng.randint(10, 80)
        nll = tokens * rng.uniform(0.5, 4.0)
        before.append((nll, tokens))
        after.append((nll * (1 + shift) + rng.gauss(0, 0.1 * nll), tokens))
    return after, before


def test_the_bootstrap_repeats_with_its_seed_and_covers_the_true_difference():
    after, before = synthetic(random.Random(0), 60, -0.05)
    one = paired_bootstrap(after, before, resamples=1000, seed=3, relative=True)
    assert one == paired_bootstrap(after, before, resamples=1000, seed=3, relative=True)  # repeatable
    assert one != paired_bootstrap(after, before, resamples=1000, seed=4, relative=True)
    assert one.low < one.estimate < one.high and one.confidence == 0.95
    rng = random.Random(1)
    covered = 0
    for trial in range(40):
        a, b = synthetic(rng, 60, -0.05)
        ci = paired_bootstrap(a, b, resamples=500, seed=trial, relative=True)
        covered += ci.low <= -0.05 <= ci.high
    assert covered >= 34, covered  # a 95 % interval: about 38 of 40


def test_pairing_cancels_shared_difficulty():
    """A uniform 3 % gain on examples of very different difficulty is significant paired, not when unpaired."""
    after, before = synthetic(random.Random(2), 40, -0.03)
    after = [(b[0] * 0.97, b[1]) for b in before]
    ci = paired_bootstrap(after, before, resamples=1000, relative=True)
    assert ci.high < 0 and ci.estimate == pytest.approx(-0.03)
    unpaired = paired_bootstrap(after, list(reversed(before)), resamples=1000, relative=True)
    assert unpaired.low < 0 < unpaired.high


def test_absolute_difference_of_rates_and_edge_cases():
    after = [(1.0, 1.0)] * 15 + [(0.0, 1.0)] * 5
    before = [(0.0, 1.0)] * 10 + [(1.0, 1.0)] * 5 + [(0.0, 1.0)] * 5
    ci = paired_bootstrap(after, before, resamples=1000)
    assert ci.estimate == pytest.approx(0.5) and ci.low > 0
    assert paired_bootstrap([], []) is None
    with pytest.raises(ValueError):
        paired_bootstrap([(1.0, 1.0)], [])


def chatty(n: int = 30) -> tuple[list, list, list[str]]:
    """Three held-out sessions of `n` next actions: every action of the chatty one is a gain (0 → 1), the other two
    are mixed and unchanged. The issue's case: most gains are one polling call in near-identical contexts."""
    rng = random.Random(5)
    after, before, sessions = [], [], []
    for s in ("chatty", "quiet-1", "quiet-2"):
        for _ in range(n):
            was = 0.0 if s == "chatty" else float(rng.random() < 0.4)
            before.append((was, 1.0))
            after.append((1.0 if s == "chatty" else was, 1.0))
            sessions.append(s)
    return after, before, sessions


def test_one_chatty_session_cannot_make_a_gain_significant():
    """The must-show: per action the gain's interval excludes zero; resampling sessions it does not."""
    after, before, sessions = chatty()
    per_action = paired_bootstrap(after, before)
    assert per_action.estimate == pytest.approx(1 / 3) and per_action.excludes_zero() and per_action.low > 0.2
    assert per_action.clusters == 90
    per_session = paired_bootstrap(after, before, clusters=sessions)
    assert per_session.estimate == per_action.estimate and per_session.clusters == 3
    assert not per_session.excludes_zero() and per_session.low <= 0 < per_session.high, per_session
    assert per_session == paired_bootstrap(after, before, clusters=sessions)  # repeatable


def test_the_cluster_bootstrap_is_the_unit_bootstrap_when_each_unit_is_its_own_session():
    after, before = synthetic(random.Random(6), 30, -0.04)
    alone = [f"s{i:02d}" for i in range(30)]  # sorted as the units are: the same draws
    clustered, units = (paired_bootstrap(after, before, relative=True, clusters=c) for c in (alone, None))
    wider = widening(30, 0.95)  # … widened for 30 clusters
    assert clustered.estimate == units.estimate and clustered.clusters == units.clusters == 30
    assert clustered.low == pytest.approx(units.estimate - wider * (units.estimate - units.low))
    assert clustered.high == pytest.approx(units.estimate + wider * (units.high - units.estimate))
    assert paired_bootstrap(after, before, clusters=["one"] * 30) is None  # one session: no interval across them
    with pytest.raises(ValueError):
        paired_bootstrap(after, before, clusters=["a"])


def test_spread_evidence_stays_significant_at_the_session_level():
    """A gain spread over many sessions keeps an interval above zero when sessions are resampled."""
    rng = random.Random(7)
    after, before, sessions = [], [], []
    for s in range(14):
        for _ in range(4):
            was = float(rng.random() < 0.2)
            before.append((was, 1.0))
            after.append((max(was, float(rng.random() < 0.6)), 1.0))
            sessions.append(f"s{s}")
    ci = paired_bootstrap(after, before, clusters=sessions)
    assert ci.low > 0 and ci.clusters == 14


def null_sessions(rng: random.Random, k: int) -> tuple[list, list, list[str]]:
    """k sessions of 2–12 loss examples; each session has its own zero-mean effect, so the true change is zero."""
    after, before, sessions = [], [], []
    for s in range(k):
        effect = rng.gauss(0, 0.03)
        for _ in range(rng.randint(2, 12)):
            tokens = rng.randint(10, 80)
            nll = tokens * rng.uniform(0.5, 4.0)
            before.append((nll, tokens))
            after.append((nll * (1 + effect + rng.gauss(0, 0.01)), tokens))
            sessions.append(f"s{s}")
    return after, before, sessions


def test_few_sessions_widen_the_interval_so_it_is_not_too_sure():
    """On null data a bare percentile interval over 4 sessions excludes zero far more often than 5 % of the time;
    widened by t(k − 1) / z · √(k / (k − 1)) it keeps close to 5 %. Known t quantiles check the widening."""
    assert t_quantile(0.95, 2) == pytest.approx(4.3027, abs=1e-4)
    assert t_quantile(0.95, 13) == pytest.approx(2.1604, abs=1e-4)
    assert t_quantile(0.90, 7) == pytest.approx(1.8946, abs=1e-4)
    assert widening(30, 0.95) == pytest.approx(1.06, abs=0.01) and widening(3, 0.95) > 2.5
    rng = random.Random(11)
    bare = wide = 0
    trials = 150
    for trial in range(trials):
        after, before, sessions = null_sessions(rng, 4)
        ci = paired_bootstrap(after, before, resamples=300, seed=trial, relative=True, clusters=sessions)
        w = widening(4, 0.95)
        bare += ci.estimate - (ci.estimate - ci.low) / w > 0 or ci.estimate + (ci.high - ci.estimate) / w < 0
        wide += ci.excludes_zero()
    assert bare / trials > 0.15 and wide / trials <= 0.1, (bare, wide)
