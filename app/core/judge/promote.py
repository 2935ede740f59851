"""Gate and promote: a candidate checkpoint is evaluated with the base model and the deployed model on one held-out
set, judged, and the verdict recorded; only a pass moves the deployed pointer (recorded by judge/deployment, where
rolling back lives too)."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from app.core.base import paths
from app.core.base.schema import EvalRow, Promotion, VerdictRow
from app.core.base.store import Store
from app.core.judge import deployment, gate
from app.core.judge.evaluate import Sink, choose_set, evaluate_all, evaluator_for
from app.core.judge.evidence import Evidence
from app.core.judge.records import JudgeError, Target, thresholds
from app.core.judge.report import EvalReport, EvalSettings, composite


# what a judgement reads on this machine when nothing says otherwise: on a CPU the teacher-forced loss is most of an
# evaluation's time (every token of every example), so fewer loss examples; next actions are what the gate's
# agreement, validity and reward rest on, so at least 96 (a 0.68 → 0.57 validity drop over 28 spans zero)
CPU_LOSS_EXAMPLES, CPU_CONTEXTS = 64, 96
GPU_LOSS_EXAMPLES, GPU_CONTEXTS = 200, 200


def settings_here(judge_with: str = "auto", examples: int = 0, contexts: int = 0, **explicit) -> EvalSettings:
    """The settings a judgement uses on this machine: the one home a cycle, `nightschool promote | compare` and the
    Judge tab read (through the school policy: runtime/school/policy.judge_settings). The evaluator (auto: llama.cpp
    on an f16 GGUF on a CPU, transformers with a GPU), the loss examples (0: 64 on a CPU, 200 with a GPU), the next
    actions (0: 96 on a CPU, 200 with a GPU); samples and decoding are EvalSettings' own. `explicit`: EvalSettings
    fields a person named (a CLI option); None is not named."""
    gpu = paths.gpu_count() > 0
    chosen = {"evaluator": evaluator_for(judge_with),
              "max_examples": examples or (GPU_LOSS_EXAMPLES if gpu else CPU_LOSS_EXAMPLES),
              "max_contexts": contexts or (GPU_CONTEXTS if gpu else CPU_CONTEXTS)}
    return EvalSettings(**{**chosen, **{k: v for k, v in explicit.items() if v is not None}})


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
example by example: each evaluation's per-example files beside its report). No `settings`: this machine's
(settings_here)."""
    settings = settings or settings_here()
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

