"""Gate and promote: a candidate checkpoint is evaluated with the base model and the deployed model on one held-out
set, judged, and the verdict recorded; only a pass moves the deployed pointer (recorded by judge/deployment, where
rolling back lives too)."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from app.core.base.schema import EvalRow, Promotion, VerdictRow
from app.core.base.store import Store
from app.core.judge import deployment, gate
from app.core.judge.evaluate import Sink, choose_set, evaluate_all
from app.core.judge.evidence import Evidence
from app.core.judge.records import JudgeError, Target, thresholds
from app.core.judge.report import EvalReport, EvalSettings, composite


@dataclass
class Judgement:
    target: Target
    verdict: gate.Verdict
    row: VerdictRow
    reports: dict[str, EvalReport]  # candidate, base, deployed (when another checkpoint is deployed)
    evaluated: dict[str, dict] = field(default_factory=dict)  # name -> seconds it took here, reused (cached) or not


@dataclass
class Compared:
    target: Target
    eval: EvalRow
    report: EvalReport

    @property
    def score(self) -> float:
        return composite(self.report.metrics)


def compare(store: Store, targets: list[Target], dataset: str | None = None, file: str | None = None,
            settings: EvalSettings | None = None, sink: Sink | None = None,
            cancel: threading.Event | None = None) -> list[Compared]:
    """Each model evaluated on the same held-out set (the first checkpoint's), ranked by composite score."""
    base_model = next((t.base_model for t in targets if not t.is_base), targets[0].base_model)
    targets = [Target(base_model) if t.is_base else t for t in targets]
    if len({t.base_model for t in targets}) > 1:
        raise JudgeError("these checkpoints come from different base models",
                         why=", ".join(sorted({t.base_model for t in targets})), fix="compare within one base model")
    evset = choose_set(store, next((t for t in targets if not t.is_base), targets[0]), dataset, file)
    done = evaluate_all(store, targets, evset, settings, sink, cancel=cancel)
    out = [Compared(t, e.row, e.report) for t, e in zip(targets, done)]
    return sorted(out, key=lambda c: -c.score)


def judge(store: Store, target: Target, dataset: str | None = None, file: str | None = None,
          settings: EvalSettings | None = None, sink: Sink | None = None,
          cancel: threading.Event | None = None) -> Judgement:
    """Evaluate the candidate, the base and the deployed model on one held-out set; record the gate's verdict (paired
example by example: each evaluation's per-example files beside its report)."""
    if target.is_base:
        raise JudgeError("the base model is not a candidate", fix="name a checkpoint; roll back to return to the base")
    evset = choose_set(store, target, dataset, file)
    dep = deployment.deployed_target(store, target.base_model)
    who = {"candidate": target, "base": Target(target.base_model)}
    if dep is not None and dep.id != target.id:
        who["deployed"] = dep
    done = dict(zip(who, evaluate_all(store, list(who.values()), evset, settings, sink, cancel=cancel)))
    evaluated = {name: {"seconds": e.seconds, "reused": e.reused, "worker_s": e.report.elapsed_s}
                 for name, e in done.items()}
    reports = {name: e.report for name, e in done.items()}
    cand_row, base_row = done["candidate"].row, done["base"].row
    dep_row = done["deployed"].row if "deployed" in done else None
    th = thresholds(store)
    evidence = {name: Evidence.read(Path(row.report_path)) for name, row in
                (("candidate", cand_row), ("base", base_row), ("deployed", dep_row)) if row is not None}
    verdict = gate.judge(evidence["candidate"], evidence["base"], evidence.get("deployed"), th)
    with store.session() as s:
        row = VerdictRow(checkpoint_id=target.id, eval_id=cand_row.id, base_eval_id=base_row.id,
                         deployed_eval_id=dep_row.id if dep_row else None, verdict=verdict.verdict,
                         reasons_json=json.dumps(verdict.reasons), thresholds_json=th.model_dump_json())
        s.add(row)
    return Judgement(target, verdict, row, reports, evaluated)


def promote(store: Store, target: Target, dataset: str | None = None, file: str | None = None,
            settings: EvalSettings | None = None, sink: Sink | None = None,
            cancel: threading.Event | None = None) -> tuple[Judgement, Promotion | None]:
    """Through the gate: the verdict is recorded either way; only a pass is promoted (None otherwise)."""
    judgement = judge(store, target, dataset, file, settings, sink, cancel)
    if judgement.verdict.verdict != "pass":
        return judgement, None
    return judgement, deployment.promote(store, target, judgement.row.id, judgement.verdict.summary())

