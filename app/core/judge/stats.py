"""Paired statistics for the gate, in pure Python: a percentile bootstrap interval for the difference (or relative
difference) of a ratio statistic over paired units, and McNemar's exact test for paired yes/no outcomes.

A ratio statistic is sum(numerator) / sum(denominator) over units: held-out loss = summed NLL / assistant tokens over
examples, tool-call validity = valid / attempted blocks over contexts, an agreement or mean reward = sum / count.
Paired: one resample of unit indices serves both models, so what the units share (their difficulty) cancels out.
Clustered: units of one session are not independent (a polling loop gives near-identical next actions), so with
`clusters` (a session id per unit) the bootstrap resamples whole sessions, summing the numerators and denominators of
the drawn sessions' units: one chatty session cannot make a change look surer than the sessions behind it allow.
With few clusters a percentile bootstrap is too narrow (its spread is that of k draws of k, and the tails of a mean of
few are a t distribution's, not a normal's): the clustered interval is widened about its estimate by
t(k − 1) / z · √(k / (k − 1)). On null data (sessions of 2–12 examples with their own zero-mean effect, 300 trials
each) the 95 % interval excluded zero in 28 % of trials with 3 sessions, 18 % with 5, 10 % with 14 and 7 % with 30;
widened, in 5–6 % (tests/core/judge/test_stats.py checks it on fewer trials)."""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from math import atan, comb, cos, pi, sin, sqrt
from statistics import NormalDist

Unit = tuple[float, float]  # (numerator, denominator) of one paired unit for one model


@dataclass(frozen=True)
class Interval:
    """A point estimate and its percentile bootstrap interval at `confidence`."""

    estimate: float
    low: float
    high: float
    confidence: float
    clusters: int = 0  # the resampled units: sessions when clustered, else the paired units themselves

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


def _t_within(t: float, dof: int) -> float:
    """P(|T| < t) for Student's t with an integer `dof` (Abramowitz & Stegun 26.7.3–4)."""
    theta = atan(t / sqrt(dof))
    c2, term = cos(theta) ** 2, 1.0
    if dof % 2:
        total = 0.0
        for j in range(1, (dof - 1) // 2 + 1):  # cos θ · (1 + 2/3 cos² θ + 2·4/(3·5) cos⁴ θ + …)
            total += term
            term *= c2 * (2 * j) / (2 * j + 1)
        return 2 / pi * (theta + sin(theta) * cos(theta) * total) if dof > 1 else 2 * theta / pi
    total = 0.0
    for j in range(1, dof // 2 + 1):  # sin θ · (1 + 1/2 cos² θ + 1·3/(2·4) cos⁴ θ + …)
        total += term
        term *= c2 * (2 * j - 1) / (2 * j)
    return sin(theta) * total


def t_quantile(confidence: float, dof: int) -> float:
    """The t such that P(|T| < t) = `confidence` (two-sided), by bisection."""
    lo, hi = 0.0, 1e4
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_within(mid, dof) < confidence else (lo, mid)
    return (lo + hi) / 2


def widening(clusters: int, confidence: float) -> float:
    """How much wider than its percentile spread a cluster bootstrap interval over `clusters` is made: the t
    quantile over the normal one, times the bootstrap's variance correction √(k / (k − 1))."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    return t_quantile(confidence, clusters - 1) / z * sqrt(clusters / (clusters - 1))


def _groups(n: int, clusters: Sequence[str] | None) -> list[list[int]]:
    """The unit indices of each cluster, clusters in sorted order (repeatable); each unit alone without clusters."""
    if clusters is None:
        return [[i] for i in range(n)]
    if len(clusters) != n:
        raise ValueError(f"{len(clusters)} cluster labels for {n} paired units")
    by: dict[str, list[int]] = {}
    for i, c in enumerate(clusters):
        by.setdefault(c, []).append(i)
    return [by[c] for c in sorted(by)]


def paired_bootstrap(after: Sequence[Unit], before: Sequence[Unit], resamples: int = 2000, seed: int = 0,
                     confidence: float = 0.95, relative: bool = False, empty: float | None = None,
                     clusters: Sequence[str] | None = None) -> Interval | None:
    """The interval of ratio(after) − ratio(before) (or that difference / ratio(before) when `relative`) over paired
    units (after[i] and before[i] are the same unit). Percentile bootstrap, `resamples` resamples with a fixed `seed`
    (repeatable) of the unit indices, or with `clusters` (one label per unit: its session) of whole clusters, as many
    as there are, each adding all its units (the cluster bootstrap). None when there is no unit, the point estimate is
    undefined, or `clusters` has fewer than two: one session's units cannot show how another session would go.
    A clustered interval is widened about its estimate for the few clusters (`widening`). Resamples whose statistic
    is undefined (a zero denominator without `empty`) are left out."""
    if len(after) != len(before):
        raise ValueError(f"paired units differ in number: {len(after)} vs {len(before)}")
    point = _difference(ratio(after, empty=empty), ratio(before, empty=empty), relative)
    groups = _groups(len(after), clusters)
    if not after or point is None or (clusters is not None and len(groups) < 2):
        return None
    rng, n = random.Random(seed), len(groups)
    # num_a, den_a, num_b, den_b summed over each cluster's units (a unit alone when unclustered)
    cols = [[sum(units[i][k] for i in g) for g in groups] for units in (after, before) for k in (0, 1)]
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
    low, high = _percentile(stats, tail), _percentile(stats, 1 - tail)
    if clusters is not None:
        wider = widening(n, confidence)
        low, high = point - wider * (point - low), point + wider * (high - point)
    return Interval(point, low, high, confidence, n)


def ratio_interval(units: Sequence[Unit], resamples: int = 2000, seed: int = 0, confidence: float = 0.95,
                   clusters: Sequence[str] | None = None) -> Interval | None:
    """The interval of ratio(units) itself (a share: yes / trials), percentile bootstrap as `paired_bootstrap` — with
    `clusters`, whole sessions resampled and the interval widened for their number — against a reference of zero
    (each unit (0, 1)), so the difference is the ratio."""
    return paired_bootstrap(units, [(0.0, 1.0)] * len(units), resamples, seed, confidence, clusters=clusters)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for the discordant pairs: b units only the first model got right, c only the
    second. Under no difference each discordant pair goes either way with probability 1/2: p = 2 · P(X ≤ min(b, c)),
    X ~ Binomial(b + c, 1/2), capped at 1 (1 when there is no discordant pair). It assumes independent pairs; the
    gate asks the session-level interval too, so pairs of one session cannot carry a verdict on their own."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, k) for k in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)
