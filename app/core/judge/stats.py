"""Paired statistics for the gate, in pure Python: a percentile bootstrap interval for the difference (or relative
difference) of a ratio statistic over paired units, and McNemar's exact test for paired yes/no outcomes.

A ratio statistic is sum(numerator) / sum(denominator) over units: held-out loss = summed NLL / assistant tokens over
examples, tool-call validity = valid / attempted blocks over contexts, an agreement or mean reward = sum / count.
Paired: one resample of unit indices serves both models, so what the units share (their difficulty) cancels out."""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

Unit = tuple[float, float]  # (numerator, denominator) of one paired unit for one model


@dataclass(frozen=True)
class Interval:
    """A point estimate and its percentile bootstrap interval at `confidence`."""

    estimate: float
    low: float
    high: float
    confidence: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def ratio(units: Sequence[Unit], picks: Sequence[int] | None = None, empty: float | None = None) -> float | None:
    """sum(num) / sum(den) over `units` (or the units at `picks`); `empty` when the denominator sums to 0."""
    chosen = units if picks is None else [units[i] for i in picks]
    den = sum(u[1] for u in chosen)
    return sum(u[0] for u in chosen) / den if den else empty


def _difference(after: float | None, before: float | None, relative: bool) -> float | None:
    if after is None or before is None:
        return None
    if not relative:
        return after - before
    return (after - before) / abs(before) if before else None


def _percentile(values: list[float], q: float) -> float:
    """Linear interpolation between the order statistics (as numpy's default)."""
    pos = q * (len(values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def paired_bootstrap(after: Sequence[Unit], before: Sequence[Unit], resamples: int = 2000, seed: int = 0,
                     confidence: float = 0.95, relative: bool = False, empty: float | None = None) -> Interval | None:
    """The interval of ratio(after) − ratio(before) (or that difference / ratio(before) when `relative`) over paired
    units (after[i] and before[i] are the same unit). Percentile bootstrap, `resamples` resamples of the unit indices
    with a fixed `seed` (repeatable). None when there is no unit or the point estimate is undefined; resamples whose
    statistic is undefined (a zero denominator without `empty`) are left out."""
    if len(after) != len(before):
        raise ValueError(f"paired units differ in number: {len(after)} vs {len(before)}")
    point = _difference(ratio(after, empty=empty), ratio(before, empty=empty), relative)
    if not after or point is None:
        return None
    rng, n = random.Random(seed), len(after)
    cols = [[u[k] for u in units] for units in (after, before) for k in (0, 1)]  # num_a, den_a, num_b, den_b
    stats = []
    for _ in range(resamples):
        picks = rng.choices(range(n), k=n)
        na, da, nb, db = (sum(map(col.__getitem__, picks)) for col in cols)
        value = _difference(na / da if da else empty, nb / db if db else empty, relative)
        if value is not None:
            stats.append(value)
    if not stats:
        return None
    stats.sort()
    tail = (1 - confidence) / 2
    return Interval(point, _percentile(stats, tail), _percentile(stats, 1 - tail), confidence)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for the discordant pairs: b units only the first model got right, c only the
    second. Under no difference each discordant pair goes either way with probability 1/2: p = 2 · P(X ≤ min(b, c)),
    X ~ Binomial(b + c, 1/2), capped at 1 (1 when there is no discordant pair)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, k) for k in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)
