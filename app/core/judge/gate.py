"""The quality gate: a candidate checkpoint's evaluation weighed against the base model's and the deployed model's on
the same held-out set, example by example. Verdict pass | fail | inconclusive, every check in words with its interval.

Each gated metric is a paired comparison (stats.py): held-out loss over the loss examples (relative change, paired
bootstrap), next-action agreement over the next actions (exact McNemar test + paired bootstrap interval), tool-call
validity and behavioural reward over the next actions (paired bootstrap). The intervals are session-level: the
bootstrap resamples held-out sessions (a cluster bootstrap), so one chatty session cannot carry a verdict; evidence
that names no sessions (written before, or a held-out file without session ids) is resampled per unit, and the check
says so. Rules, against every reference:
- inconclusive: a reference is not comparable (another held-out set or base model, no per-example evidence), fewer
  than the minimum loss examples or next actions, all of them from one session (no interval across sessions can be
  computed), or no primary metric (loss, agreement) improved significantly by at least its minimum effect.
  Inconclusive is never promoted.
- fail: a gated metric significantly worse: its interval entirely below zero, beyond `fall_tolerance` (agreement:
  McNemar's test significant too). Only evidence fails a candidate, as only evidence passes one: a point estimate
  worse by more than `max_regression` (15 %) whose interval reaches zero does not fail by itself; its check says so
  after its interval ("worse by 16 % on the point estimate (beyond the 15 % bound), not significantly: its interval
  reaches zero"; status `point_worse`, ok), so a person sees it. `max_regression` bounds only a check with no
  interval to weigh (its paired units all from one session, or none): there a point estimate worse by more than it
  fails (status `regressed`), fail-closed.
- pass: otherwise, with at least one primary metric improved significantly by its minimum effect vs each reference.
  A noise checkpoint is never deployed: it has no significant primary gain (inconclusive); a real gain with no
  significant fall passes."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.core.judge.evidence import UNITS, Evidence, discordant, paired
from app.core.judge.report import METRICS
from app.core.judge.stats import Interval, mcnemar_exact, paired_bootstrap

GATED = ("loss", "agreement", "validity", "reward")  # perplexity follows loss; tool_agreement is inside agreement
SETTING = "gate"
VERDICTS = ("pass", "fail", "inconclusive")
HEADS = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}
# what a change of each metric can be at most (loss: relative; the rates and the reward lie in [0, 1]): a clustered
# interval widened for few sessions is shown within it
BOUNDS: dict[str, tuple[float, float | None]] = {"loss": (-1.0, None), "agreement": (-1.0, 1.0),
                                                 "validity": (-1.0, 1.0), "reward": (-1.0, 1.0)}
OLD_KEYS = {"loss_must_improve", "min_loss_gain", "must_not_fall"}  # settings stored before format 2 have them


class Thresholds(BaseModel):
    """The gate's settings (key `gate`). Minimum sample sizes: with fewer than ~20 paired units a percentile bootstrap
    interval is too narrow (it under-covers) and McNemar's exact test can only detect a change of nearly every
    discordant pair, so 20 loss examples and 20 next actions are the least a verdict rests on."""

    model_config = ConfigDict(extra="ignore")  # settings stored by older versions carry keys that are gone
    format: int = 2
    primary: list[str] = Field(default_factory=lambda: ["loss", "agreement"])  # one must improve significantly
    gated: list[str] = Field(default_factory=lambda: list(GATED))  # none may get significantly worse
    min_gain: dict[str, float] = Field(default_factory=lambda: {"loss": 0.02, "agreement": 0.05, "validity": 0.05,
                                                                 "reward": 0.05})  # loss: relative; others: absolute
    fall_tolerance: float = Field(0.0, ge=0.0)  # a significant fall within this (loss: relative) does not fail
    # a check with no interval fails when its point estimate is worse by more than this fraction; with an interval
    # it only says so (a fall must be significant to fail). Kept in stored settings as it was.
    max_regression: float = Field(0.15, ge=0.0)
    min_examples: int = Field(20, ge=1)  # paired held-out loss examples needed for a verdict
    min_contexts: int = Field(20, ge=1)  # paired held-out next actions needed for a verdict
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    resamples: int = Field(2000, ge=100)
    seed: int = 0

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data):
        """Settings stored before format 2 compared point estimates: keep what a person changed (the tolerance, the
        regression bound, a loss gain or a minimum above the old defaults); the rest takes the new defaults."""
        if not isinstance(data, dict) or "format" in data or not OLD_KEYS & data.keys():
            return data
        out = {k: data[k] for k in ("fall_tolerance", "max_regression") if k in data}
        if data.get("min_loss_gain", 0.0) > 0.02:
            out["min_gain"] = {**cls.model_fields["min_gain"].default_factory(), "loss": data["min_loss_gain"]}
        if data.get("min_contexts", 5) > 20:
            out["min_contexts"] = data["min_contexts"]
        return out


class Check(BaseModel):
    """One paired comparison of a metric against a reference, and what the rules make of it."""

    metric: str
    against: str  # base | deployed
    before: float | None = None
    after: float | None = None
    delta: float | None = None  # after − before; relative (a fraction of before) for the loss
    relative: bool = False
    low: float | None = None  # the interval of delta at `confidence`
    high: float | None = None
    confidence: float | None = None
    n: int = 0  # paired examples (loss) or next actions
    unit: str = "examples"
    sessions: int | None = None  # held-out sessions the interval resamples; None: resampled per unit (none named)
    gained: int | None = None  # agreement: next actions only the candidate got right (c) …
    lost: int | None = None  # … and only the reference got right (b)
    p_value: float | None = None  # agreement: exact McNemar
    # improved | below_minimum | inconclusive | held | point_worse (said, ok) | worse | regressed | missing
    status: str = "held"
    ok: bool = True
    text: str = ""


class Verdict(BaseModel):
    verdict: Literal["pass", "fail", "inconclusive"]
    checks: list[Check] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # why it is inconclusive

    @property
    def reasons(self) -> list[str]:
        """The words: failures first, then what held, then notes."""
        return [c.text for c in self.checks if not c.ok] + [c.text for c in self.checks if c.ok] + self.notes

    def summary(self) -> str:
        """The head and what decided it; a point estimate worse beyond the bound is named even when it did not fail."""
        failed = [c.text for c in self.checks if not c.ok]
        shown = [c.text for c in self.checks][:2]
        shown += [c.text for c in self.checks if c.status == "point_worse" and c.text not in shown]
        said = failed or self.notes or shown or ["nothing to check"]
        return HEADS[self.verdict] + ": " + "; ".join(said)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _signed(value: float, relative: bool) -> str:
    return f"{value * 100:+.1f} %".replace("-", "−") if relative else f"{value:+.3f}".replace("-", "−")


def _interval(check: Check) -> str:
    """E.g. "95 % CI −1.6 %…−0.4 % over 14 sessions"; per unit when the evidence names no sessions."""
    if check.low is None:
        return "no interval across sessions: all from one session" if check.sessions == 1 else "no interval"
    pct = f"{check.confidence * 100:.0f} % CI"
    over = (f"over {check.sessions} sessions" if check.sessions is not None
            else f"per {check.unit.rstrip('s')} (the evidence names no sessions)")
    return f"{pct} {_signed(check.low, check.relative)}…{_signed(check.high, check.relative)} {over}"


def describe(check: Check) -> str:
    """E.g. "held-out loss 1.979 → 1.959 (−1.0 %, 95 % CI −1.6 %…−0.4 % over 14 sessions, 24 examples) vs the base
    model: …"."""
    if check.metric == "agreement" and check.gained is not None:
        net = check.gained - check.lost
        counts = (f"{net:+d} of {check.n} {check.unit}: {check.gained} gained, {check.lost} lost, "
                  f"McNemar p {check.p_value:.3f}").replace("-", "−")
        inner = f"{counts}, {_interval(check)}"
    else:
        change = _signed(check.delta, check.relative) if check.delta is not None else "n/a"
        inner = f"{change}, {_interval(check)}, {check.n} {check.unit}"
    return f"{METRICS[check.metric][0]} {_num(check.before)} → {_num(check.after)} ({inner}) vs the {check.against} model"


def _better(metric: str, value: float) -> float:
    """A change signed so that positive is better."""
    return -value if METRICS[metric][1] == "lower" else value


def _judge_check(check: Check, th: Thresholds) -> Check:
    """Status, ok and text of a measured check by the rules: only a significant fall fails; a point estimate beyond
    `max_regression` fails only where there is no interval to weigh it."""
    metric, alpha = check.metric, 1 - th.confidence
    lo, hi = sorted((_better(metric, check.low), _better(metric, check.high))) if check.low is not None else (0, 0)
    better = _better(metric, check.delta)
    tested = check.p_value is None or check.p_value < alpha  # agreement needs McNemar too
    worse = -better / (1 if check.relative else abs(check.before) or 1) if better < 0 else 0.0
    need = th.min_gain.get(metric, 0.0)
    minimum = f"{need * 100:g} %" if check.relative else f"{need:+g}"
    if check.low is None and worse > th.max_regression:
        status, words = "regressed", f"worse by more than {th.max_regression:.0%}, with no interval to weigh it"
    elif hi < -th.fall_tolerance and tested:
        status, words = "worse", "significantly worse"
    elif lo > 0 and tested:
        status, words = ("improved", "improved") if better >= need else ("below_minimum",
                                                                          f"below the {minimum} minimum")
    elif worse > th.max_regression:
        why = ("its interval reaches zero" if hi >= 0 else f"McNemar p {check.p_value:.3f}" if not tested
               else f"within the {th.fall_tolerance:g} tolerance")
        status, words = "point_worse", (f"worse by {worse * 100:.0f} % on the point estimate (beyond the "
                                        f"{th.max_regression * 100:g} % bound), not significantly: {why}")
    else:
        status = "inconclusive" if metric in th.primary else "held"
        words = "inconclusive" if metric in th.primary else "no significant change"
    ok = status not in ("regressed", "worse")
    return check.model_copy(update={"status": status, "ok": ok, "text": describe(check) + ": " + words})


def measure(metric: str, cand: Evidence, ref: Evidence, name: str, th: Thresholds) -> Check | None:
    """The paired comparison of one metric (None when neither model has it)."""
    before, after = ref.report.metrics.get(metric), cand.report.metrics.get(metric)
    words = METRICS[metric][0]
    if before is None or after is None:
        if before is None:
            return None  # the reference has none: nothing to hold the candidate to
        return Check(metric=metric, against=name, before=before, status="missing", ok=False,
                     text=f"{words}: the {name} model has {_num(before)}, the candidate none")
    units_a, units_b, sessions = paired(metric, cand, ref)
    relative = metric == "loss"
    ci = paired_bootstrap(units_a, units_b, th.resamples, th.seed, th.confidence, relative,
                          empty=0.0 if metric == "validity" else None, clusters=sessions)
    check = Check(metric=metric, against=name, before=before, after=after, relative=relative, n=len(units_a),
                  unit=UNITS[metric], sessions=None if sessions is None else len(set(sessions)),
                  confidence=th.confidence, **_fields(ci, before, after, relative, BOUNDS[metric]))
    if metric == "agreement":
        lost, gained = discordant(units_a, units_b)
        check = check.model_copy(update={"lost": lost, "gained": gained, "p_value": mcnemar_exact(lost, gained)})
    return _judge_check(check, th)


def _fields(ci: Interval | None, before: float, after: float, relative: bool,
            bounds: tuple[float, float | None]) -> dict:
    if ci is None:
        delta = (after - before) / abs(before) if relative and before else after - before
        return {"delta": delta}
    least, most = bounds
    return {"delta": ci.estimate, "low": max(ci.low, least), "high": ci.high if most is None else min(ci.high, most)}


def comparable(candidate: Evidence, reference: Evidence, name: str) -> list[str]:
    """Why the two cannot be compared at all ([] when they can)."""
    cand, ref = candidate.report, reference.report
    notes = []
    if ref.eval_set_sha256 != cand.eval_set_sha256:
        notes.append(f"the {name} model was evaluated on another held-out set ({ref.eval_set}); "
                     "evaluate both on the same set")
    if ref.base_model != cand.base_model:
        notes.append(f"the {name} model is another base model ({ref.base_model}): losses are not comparable")
    if not (reference.losses and candidate.losses) or not (reference.actions and candidate.actions):
        notes.append(f"the {name} model's or the candidate's evaluation has no per-example results; evaluate again")
    return notes


def enough(checks: list[Check], name: str, th: Thresholds) -> list[str]:
    """Notes when the paired evidence is too small for a verdict: too few units, or all from one session."""
    sizes = {c.metric: c.n for c in checks}
    notes = [f"all {c.n} paired held-out {c.unit} vs the {name} model come from one session: no interval across "
             "sessions can be computed (hold out more sessions)" for c in checks
             if c.metric in ("loss", "agreement") and c.sessions == 1]
    if sizes.get("loss", 0) < th.min_examples:
        notes.append(f"only {sizes.get('loss', 0)} held-out loss examples pair with the {name} model's (at least "
                     f"{th.min_examples} are needed for a verdict)")
    if sizes.get("agreement", 0) < th.min_contexts:
        notes.append(f"only {sizes.get('agreement', 0)} held-out next actions pair with the {name} model's (at "
                     f"least {th.min_contexts} are needed for a verdict)")
    return notes


def judge(candidate: Evidence, base: Evidence | None, deployed: Evidence | None = None,
          thresholds: Thresholds | None = None) -> Verdict:
    """The verdict on `candidate` against the base model and the deployed model (None: nothing is deployed beyond
    the base). Every reference must be comparable and improved on, or the verdict is inconclusive."""
    th = thresholds or Thresholds()
    if base is None:
        return Verdict(verdict="inconclusive", notes=["the base model has no evaluation on this held-out set"])
    refs = [(name, ref) for name, ref in (("base", base), ("deployed", deployed)) if ref is not None]
    notes = [n for name, ref in refs for n in comparable(candidate, ref, name)]
    if candidate.report.metrics.get("loss") is None:
        notes.append("the candidate has no held-out loss")
    if notes:
        return Verdict(verdict="inconclusive", notes=notes)
    checks = []
    for name, ref in refs:
        mine = [c for m in th.gated if (c := measure(m, candidate, ref, name, th)) is not None]
        notes += enough(mine, name, th)
        if not any(c.status == "improved" and c.metric in th.primary for c in mine):
            notes.append(f"no primary metric ({', '.join(th.primary)}) improved significantly by its minimum vs the "
                         f"{name} model")
        checks += mine
    if not all(c.ok for c in checks):
        return Verdict(verdict="fail", checks=checks, notes=notes)
    return Verdict(verdict="inconclusive" if notes else "pass", checks=checks, notes=notes)
