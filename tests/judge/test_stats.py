"""The gate's statistics against known cases: McNemar's exact p-values, a paired bootstrap that repeats with its seed,
covers the true difference on synthetic data about as often as it says, and pairs (shared difficulty cancels out)."""
from __future__ import annotations

import random
from math import comb

import pytest

from app.core.judge.stats import mcnemar_exact, paired_bootstrap, ratio


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
