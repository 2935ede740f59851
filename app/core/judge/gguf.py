"""Judging what is served: the exported GGUF evaluated through llama.cpp (`engine.workers.evaluate_gguf`) on the same held-out
set as the checkpoint, cached by (the file's sha256, the set's sha256, the settings), and compared with the HF
evaluation of the same checkpoint: every metric side by side, how often the two evaluators' next-action outcomes agree,
and a flag when the quantization loses more than the tolerance allows."""
from __future__ import annotations

import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from app.core.base import protocol as P
from app.core.base.fingerprint import sha256_file
from app.core.base.schema import EvalRow, Setting
from app.core.base.store import Store
from app.core.judge.evalset import EvalConfig, EvalSet
from app.core.judge.evaluate import Sink, _config, _labelled, evals_dir
from app.core.judge.records import JudgeError, Target
from app.core.judge.report import GENERATIONS, METRICS, EvalReport, EvalSettings, read_rows
from app.core.workers import WorkerRun

SETTING = "gguf_tolerance"


class GgufEvalConfig(EvalConfig):
    """An evaluation request for `engine.workers.evaluate_gguf`: the EvalConfig of the checkpoint plus the file to run."""

    gguf: str = ""  # "": the worker converts the model itself to an f16 GGUF (EvalSettings.evaluator "llama.cpp")
    gguf_sha256: str = ""
    quant: str = ""
    n_threads: int | None = None  # llama.cpp's threads (None: its default)

    def cache_key(self) -> str:
        return f"{self.gguf_sha256[:16]}-{self.eval_set_sha256[:12]}-{self.settings_sha256()[:12]}"


class Tolerance(BaseModel):
    """How much the shipped file may lose against the checkpoint before it is flagged."""

    loss_rel: float = Field(0.05, ge=0)  # held-out loss up by more than this share of the HF loss
    agreement_drop: float = Field(0.05, ge=0)  # next-action agreement down by more than this (absolute) …
    min_lost: int = Field(2, ge=1)  # … and at least this many more actions lost than gained (one flip of 16 is noise)


def tolerance(store: Store) -> Tolerance:
    with store.session() as s:
        row = s.get(Setting, SETTING)
    return Tolerance.model_validate_json(row.value) if row else Tolerance()


def set_tolerance(store: Store, value: Tolerance) -> None:
    with store.session() as s:
        s.merge(Setting(key=SETTING, value=value.model_dump_json()))


def settings_of(store: Store, eval_id: int | None) -> EvalSettings | None:
    """The settings a recorded evaluation ran with (None when it is gone): the GGUF is judged the same way."""
    with store.session() as s:
        row = s.get(EvalRow, eval_id) if eval_id else None
    if row is None or not Path(row.report_path).is_file():
        return None
    return EvalReport.read(Path(row.report_path)).settings


@dataclass
class GgufEval:
    """A finished GGUF evaluation: its folder (report.json, generations.jsonl, losses.jsonl) and report."""

    folder: Path
    report: EvalReport
    cached: bool = False


def evaluate_gguf(store: Store, target: Target, gguf: str | Path, evset: EvalSet, settings: EvalSettings | None = None,
                  quant: str = "", sink: Sink | None = None, force: bool = False,
                  cancel: threading.Event | None = None) -> GgufEval:
    """The GGUF's evaluation on `evset` (cached on disk unless `force`); JudgeError with the worker's reason."""
    path = Path(gguf).expanduser()
    if not path.is_file():
        raise JudgeError(f"{path} is not a file", fix="name an exported .gguf file, or export the checkpoint first")
    settings = settings or EvalSettings()
    config = GgufEvalConfig(**_config(target, evset, settings).model_dump(), gguf=str(path.resolve()),
                            gguf_sha256=sha256_file(path), quant=quant)
    folder = evals_dir() / f"gguf-{config.cache_key()}"
    if not force and (folder / "report.json").is_file():
        return GgufEval(folder, EvalReport.read(folder), cached=True)
    label = f"{target.label} gguf"
    if sink is not None:
        sink(P.make(P.Log(message=f"evaluating {path.name} on {evset.name} through llama.cpp")))
    work = WorkerRun(store, "engine.workers.evaluate_gguf", {"config": config.model_dump()})
    try:
        code = work.stream(None if sink is None else lambda env: sink(_labelled(env, label)), cancel)
        if code is None:
            raise JudgeError(f"the evaluation of {path.name} was cancelled", why="nothing was recorded")
        made = work.result(P.Evaluated)
        if made is None:
            raise JudgeError(f"evaluating {path.name} through llama.cpp failed", why=work.failure(code))
        shutil.rmtree(folder, ignore_errors=True)
        shutil.move(made.path, folder)
        return GgufEval(folder, EvalReport.read(folder))
    finally:
        work.close()


def keyed(folder: Path, name: str = GENERATIONS) -> dict[str, dict]:
    """The rows of an evaluation's generations.jsonl / losses.jsonl by key ({} when the file is missing)."""
    return {r["key"]: r for r in read_rows(Path(folder) / name)}


def compare(hf: EvalReport, hf_rows: dict[str, dict], gguf: EvalReport, gguf_rows: dict[str, dict],
            tol: Tolerance | None = None) -> dict:
    """HF vs GGUF: metrics side by side, the outcome agreement of the two evaluators over the contexts both judged,
    and `flag` with the reasons when the GGUF loses more than the tolerance."""
    tol = tol or Tolerance()
    metrics = {}
    for name in METRICS:
        h, g = hf.metrics.get(name), gguf.metrics.get(name)
        metrics[name] = {"hf": h, "gguf": g, "delta": None if h is None or g is None else round(g - h, 4)}
    common = sorted(set(hf_rows) & set(gguf_rows))
    same = sum(hf_rows[k]["outcome"] == gguf_rows[k]["outcome"] for k in common)
    agreement = same / len(common) if common else None
    same_text = sum(hf_rows[k]["student"] == gguf_rows[k]["student"] for k in common)
    lost = sum(hf_rows[k]["outcome"] == "agree" != gguf_rows[k]["outcome"] for k in common)
    gained = sum(gguf_rows[k]["outcome"] == "agree" != hf_rows[k]["outcome"] for k in common)
    loss_h, loss_g = hf.metrics.get("loss"), gguf.metrics.get("loss")
    loss_rel = (loss_g - loss_h) / loss_h if loss_h and loss_g is not None else None
    reasons = []
    if loss_rel is not None and loss_rel > tol.loss_rel:
        reasons.append(f"held-out loss {loss_h:.3f} → {loss_g:.3f} in the GGUF (+{loss_rel:.1%}, more than "
                       f"+{tol.loss_rel:.0%})")
    drop = metrics["agreement"]["delta"]
    if drop is not None and -drop > tol.agreement_drop and lost - gained >= tol.min_lost:
        reasons.append(f"next-action agreement {metrics['agreement']['hf']:.2f} → {metrics['agreement']['gguf']:.2f} "
                       f"in the GGUF (more than {tol.agreement_drop:.2f} lower: {lost} actions lost, {gained} "
                       "gained)")
    return {"quant": gguf.quant, "gguf_sha256": gguf.gguf_sha256, "eval_set": gguf.eval_set, "metrics": metrics,
            "outcome_agreement": None if agreement is None else round(agreement, 4), "contexts_compared": len(common),
            "same_text": same_text, "lost": lost, "gained": gained,
            "loss_rel": None if loss_rel is None else round(loss_rel, 4), "flag": bool(reasons), "reasons": reasons,
            "tokenization_matched": gguf.tokenization_matched, "prompts_matched": gguf.prompts_matched,
            "examples": gguf.examples, "contexts": gguf.contexts,
            "elapsed_s": {"hf": hf.elapsed_s, "gguf": gguf.elapsed_s}, "tolerance": tol.model_dump()}


def served_vs_trained(store: Store, target: Target, gguf: str | Path, evset: EvalSet, quant: str = "",
                      settings: EvalSettings | None = None, sink: Sink | None = None,
                      cancel: threading.Event | None = None, force: bool = False) -> dict:
    """Evaluate the checkpoint (HF, cached like every evaluation) and its GGUF on `evset`, and compare them."""
    from app.core.judge.evaluate import evaluate

    row, hf = evaluate(store, target, evset, settings, sink, cancel=cancel)
    done = evaluate_gguf(store, target, gguf, evset, settings, quant, sink, force, cancel)
    hf_rows = keyed(Path(row.report_path).parent)
    out = compare(hf, hf_rows, done.report, keyed(done.folder), tolerance(store))
    return {**out, "label": target.label, "file": Path(gguf).name, "hf_eval": row.id, "gguf_eval": str(done.folder)}
