"""The quality gate: a candidate checkpoint's evaluation judged against the base model's and the deployed model's on
the same held-out set. Verdict pass | fail | compare_only, with every check's reason in words.

Defaults (configurable, stored in the settings table): held-out loss improves on each reference, next-action agreement
and tool-call validity do not fall, and no metric regresses by more than 15 %. compare_only when the numbers cannot be
compared: another held-out set, another base model, too few cases, or a metric the candidate lacks."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.core.judge.report import METRICS, EvalReport

GATED = ("loss", "agreement", "validity", "reward")  # perplexity follows loss; tool_agreement is inside agreement
SETTING = "gate"


class Thresholds(BaseModel):
    model_config = ConfigDict(extra="forbid")
    loss_must_improve: bool = True
    min_loss_gain: float = Field(0.0, ge=0.0)  # relative: 0.02 = at least 2 % lower than the reference
    must_not_fall: list[str] = Field(default_factory=lambda: ["agreement", "validity"])
    fall_tolerance: float = Field(0.0, ge=0.0)  # absolute slack for must_not_fall (0.05 = 5 points)
    max_regression: float = Field(0.15, ge=0.0)  # any gated metric worse by more than this fraction fails
    min_contexts: int = Field(5, ge=1)  # fewer held-out next actions: compare_only


class Check(BaseModel):
    metric: str
    against: str  # base | deployed
    before: float | None = None
    after: float | None = None
    ok: bool
    text: str


class Verdict(BaseModel):
    verdict: Literal["pass", "fail", "compare_only"]
    checks: list[Check] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # why it is compare_only

    @property
    def reasons(self) -> list[str]:
        """The words: failures first, then what held, then notes."""
        return ([c.text for c in self.checks if not c.ok] + [c.text for c in self.checks if c.ok] + self.notes)

    def summary(self) -> str:
        failed = [c.text for c in self.checks if not c.ok]
        head = {"pass": "PASS", "fail": "FAIL", "compare_only": "COMPARE ONLY"}[self.verdict]
        said = failed or self.notes or [c.text for c in self.checks][:2] or ["nothing to check"]
        return head + ": " + "; ".join(said)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _change(before: float, after: float) -> str:
    if before:
        return f"{(after - before) / abs(before) * 100:+.1f} %"
    return f"{after - before:+.3f}"


def _worse_by(metric: str, before: float, after: float) -> float:
    """How much worse `after` is than `before` as a fraction of `before` (0 when not worse)."""
    lower = METRICS[metric][1] == "lower"
    worse = (after - before) if lower else (before - after)
    if worse <= 0:
        return 0.0
    return worse / abs(before) if before else float("inf")


def comparable(candidate: EvalReport, reference: EvalReport, name: str, th: Thresholds) -> list[str]:
    notes = []
    if reference.eval_set_sha256 != candidate.eval_set_sha256:
        notes.append(f"the {name} model was evaluated on another held-out set ({reference.eval_set}); "
                     "evaluate both on the same set")
    if reference.base_model != candidate.base_model:
        notes.append(f"the {name} model is another base model ({reference.base_model}): losses are not comparable")
    if min(candidate.contexts, reference.contexts) < th.min_contexts:
        notes.append(f"only {min(candidate.contexts, reference.contexts)} held-out next actions (at least "
                     f"{th.min_contexts} are needed for a verdict)")
    return notes


def checks_against(candidate: EvalReport, reference: EvalReport, name: str, th: Thresholds) -> list[Check]:
    out: list[Check] = []
    for metric in GATED:
        before, after = reference.metrics.get(metric), candidate.metrics.get(metric)
        words = METRICS[metric][0]
        if before is None or after is None:
            if before is not None:  # the reference has it, the candidate lost it (e.g. stopped calling tools)
                out.append(Check(metric=metric, against=name, before=before, ok=False,
                                 text=f"{words}: the {name} model has {_fmt(before)}, the candidate none"))
            continue
        shift = f"{words} {_fmt(before)} → {_fmt(after)} ({_change(before, after)}) vs the {name} model"
        worse = _worse_by(metric, before, after)
        if metric == "loss" and th.loss_must_improve:
            need = before * (1 - th.min_loss_gain)
            ok = after < need
            out.append(Check(metric=metric, against=name, before=before, after=after, ok=ok,
                             text=shift + (": improved" if ok else ": did not improve"
                                           + (f" by {th.min_loss_gain:.0%}" if th.min_loss_gain else ""))))
        elif metric in th.must_not_fall:
            ok = after >= before - th.fall_tolerance - 1e-12
            out.append(Check(metric=metric, against=name, before=before, after=after, ok=ok,
                             text=shift + (": held" if ok else ": fell (it must not fall)")))
        if worse > th.max_regression:
            out.append(Check(metric=metric, against=name, before=before, after=after, ok=False,
                             text=shift + f": regressed by more than {th.max_regression:.0%}"))
    return out


def judge(candidate: EvalReport, base: EvalReport | None, deployed: EvalReport | None = None,
          thresholds: Thresholds | None = None) -> Verdict:
    """The verdict on `candidate` against the base model and the deployed model (None: nothing is deployed beyond
    the base). Every reference must be comparable, or the verdict is compare_only."""
    th = thresholds or Thresholds()
    refs = [("base", base), ("deployed", deployed)]
    if base is None:
        return Verdict(verdict="compare_only", notes=["the base model has no evaluation on this held-out set"])
    notes = [n for name, ref in refs if ref is not None for n in comparable(candidate, ref, name, th)]
    if candidate.metrics.get("loss") is None:
        notes.append("the candidate has no held-out loss")
    if notes:
        return Verdict(verdict="compare_only", notes=notes)
    checks = [c for name, ref in refs if ref is not None for c in checks_against(candidate, ref, name, th)]
    return Verdict(verdict="pass" if all(c.ok for c in checks) else "fail", checks=checks)
