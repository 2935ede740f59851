"""Gate, promote, roll back: a candidate checkpoint is evaluated with the base model and the deployed model on one
held-out set, judged, and the verdict recorded; only a pass moves the deployed pointer (a promotion row, plus
`deployed.json` written atomically for whatever serves it). Roll back returns to what was deployed before."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from app.core.base import paths
from app.core.base.files import atomic_write
from app.core.base.schema import EvalRow, Promotion, VerdictRow
from app.core.base.store import Store
from app.core.judge import gate as G
from app.core.judge.evaluate import Sink, choose_set, evaluate
from app.core.judge.evidence import Evidence
from app.core.judge.records import JudgeError, Target, deployed, resolve, thresholds
from app.core.judge.report import EvalReport, EvalSettings, composite


@dataclass
class Judgement:
    target: Target
    verdict: G.Verdict
    row: VerdictRow
    reports: dict[str, EvalReport]  # candidate, base, deployed (when another checkpoint is deployed)


@dataclass
class Compared:
    target: Target
    eval: EvalRow
    report: EvalReport

    @property
    def score(self) -> float:
        return composite(self.report.metrics)


def deployed_target(store: Store, base_model: str) -> Target | None:
    """The deployed checkpoint of a base model as a Target; None when the base model itself is what is deployed."""
    row = deployed(store, base_model)
    if row is None or row.checkpoint_id is None:
        return None
    return resolve(store, str(row.checkpoint_id))


def compare(store: Store, refs: list[str], dataset: str | None = None, file: str | None = None,
            settings: EvalSettings | None = None, sink: Sink | None = None,
            cancel: threading.Event | None = None) -> list[Compared]:
    """Each model evaluated on the same held-out set (the first checkpoint's), ranked by composite score."""
    targets = [resolve(store, r) for r in refs]
    base_model = next((t.base_model for t in targets if not t.is_base), targets[0].base_model)
    targets = [Target(base_model) if t.is_base else t for t in targets]
    if len({t.base_model for t in targets}) > 1:
        raise JudgeError("these checkpoints come from different base models",
                         why=", ".join(sorted({t.base_model for t in targets})), fix="compare within one base model")
    evset = choose_set(store, next((t for t in targets if not t.is_base), targets[0]), dataset, file)
    out = [Compared(t, *evaluate(store, t, evset, settings, sink, cancel=cancel)) for t in targets]
    return sorted(out, key=lambda c: -c.score)


def judge(store: Store, ref: str, dataset: str | None = None, file: str | None = None,
          settings: EvalSettings | None = None, sink: Sink | None = None,
          cancel: threading.Event | None = None) -> Judgement:
    """Evaluate the candidate, the base and the deployed model on one held-out set; record the gate's verdict (paired
example by example: each evaluation's per-example files beside its report)."""
    target = resolve(store, ref)
    if target.is_base:
        raise JudgeError("the base model is not a candidate", fix="name a checkpoint; roll back to return to the base")
    evset = choose_set(store, target, dataset, file)
    cand_row, cand = evaluate(store, target, evset, settings, sink, cancel=cancel)
    base_row, base = evaluate(store, Target(target.base_model), evset, settings, sink, cancel=cancel)
    reports = {"candidate": cand, "base": base}
    dep = deployed_target(store, target.base_model)
    dep_row = None
    if dep is not None and dep.id != target.id:
        dep_row, reports["deployed"] = evaluate(store, dep, evset, settings, sink, cancel=cancel)
    th = thresholds(store)
    evidence = {name: Evidence.read(Path(row.report_path)) for name, row in
                (("candidate", cand_row), ("base", base_row), ("deployed", dep_row)) if row is not None}
    verdict = G.judge(evidence["candidate"], evidence["base"], evidence.get("deployed"), th)
    with store.session() as s:
        row = VerdictRow(checkpoint_id=target.id, eval_id=cand_row.id, base_eval_id=base_row.id,
                         deployed_eval_id=dep_row.id if dep_row else None, verdict=verdict.verdict,
                         reasons_json=json.dumps(verdict.reasons), thresholds_json=th.model_dump_json())
        s.add(row)
    return Judgement(target, verdict, row, reports)


def _write_pointer(base_model: str, target: Target | None, promotion: Promotion) -> None:
    """`deployed.json`: base model → the adapter that is deployed (atomic: temp file + rename)."""
    path = paths.data_dir() / "deployed.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    data[base_model] = {"checkpoint_id": target.id if target else None, "adapter": target.adapter if target else None,
                        "promotion_id": promotion.id, "action": promotion.action}
    atomic_write(path, json.dumps(data, indent=1))


def insert(store: Store, base_model: str, target: Target | None, verdict_id: int | None, action: str,
           replaces_id: int | None, note: str) -> Promotion:
    """A promotion row (promote / rollback / deploy) and the pointer file."""
    with store.session() as s:
        row = Promotion(base_model=base_model, checkpoint_id=target.id if target else None, verdict_id=verdict_id,
                        action=action, replaces_id=replaces_id, note=note)
        s.add(row)
    _write_pointer(base_model, target, row)
    return row


def promote(store: Store, ref: str, dataset: str | None = None, file: str | None = None,
            settings: EvalSettings | None = None, sink: Sink | None = None,
            cancel: threading.Event | None = None) -> tuple[Judgement, Promotion | None]:
    """Through the gate: the verdict is recorded either way; only a pass is promoted (None otherwise)."""
    judgement = judge(store, ref, dataset, file, settings, sink, cancel)
    if judgement.verdict.verdict != "pass":
        return judgement, None
    target = judgement.target
    current = deployed(store, target.base_model)
    if current is not None and current.checkpoint_id == target.id:
        return judgement, current
    row = insert(store, target.base_model, target, judgement.row.id, "promote", current.id if current else None,
                  judgement.verdict.summary())
    return judgement, row


def rollback(store: Store, base_model: str) -> Promotion:
    """Deploy again what the current promotion replaced (or the base model); repeated, it keeps going back."""
    current = deployed(store, base_model)
    if current is None or (current.checkpoint_id is None and current.replaces_id is None):
        raise JudgeError(f"nothing to roll back for {base_model}", why="the base model is what is deployed")
    with store.session() as s:
        before = s.get(Promotion, current.replaces_id) if current.replaces_id else None
    if before is None or before.checkpoint_id is None:
        return insert(store, base_model, None, None, "rollback", before.replaces_id if before else None,
                       f"rolled back from #{current.checkpoint_id} to the base model")
    target = resolve(store, str(before.checkpoint_id))
    return insert(store, base_model, target, before.verdict_id, "rollback", before.replaces_id,
                   f"rolled back from #{current.checkpoint_id} to #{target.id}")
