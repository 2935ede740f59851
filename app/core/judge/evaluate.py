"""Evaluating a model on a held-out set: choosing the set, reusing a cached evaluation with the same set, settings and
adapter, else running the engine's evaluation worker (`engine.workers.evaluate`, transformers, or
`engine.workers.evaluate_gguf`, llama.cpp, as the settings' evaluator says) and recording its report."""
from __future__ import annotations

import json
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from app.core.base import paths, protocol as P
from app.core.base.fingerprint import sha256_file
from app.core.base.schema import BuiltDataset, EvalRow
from app.core.base.store import Store
from app.core.datasets.catalog import Registry
from app.core.datasets.pair_records import blind_contexts
from app.core.judge.evalset import EvalConfig, EvalSet, set_aside
from app.core.judge.records import JudgeError, Target, cached_eval
from app.core.judge.report import EvalReport, EvalSettings
from app.core.workers import WorkerRun

Sink = Callable[[P.Envelope], None]


def evals_dir() -> Path:
    path = paths.data_dir() / "evals"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _of_dataset(ds: BuiltDataset) -> EvalSet:
    test = Path(ds.path) / "test.jsonl"
    if ds.kind != "sft" or ds.test == 0 or not test.is_file():
        raise JudgeError(f"the dataset {ds.name} has no held-out (test) examples",
                         fix="build a dataset with a test share above 0, or pass a held-out file")
    return EvalSet(f"{ds.name}/test", test, sha256_file(test), ds.base_model,
                   tuple(p for p in (Path(ds.path) / "train.jsonl",) if p.is_file()))


def latest_heldout(store: Store, base_model: str) -> BuiltDataset | None:
    """The dataset whose test split is the current held-out set of a base model (the newest with a test split)."""
    return Registry(store).current_heldout(base_model)


def choose_set(store: Store, target: Target, dataset: str | None = None, file: str | Path | None = None) -> EvalSet:
    """The held-out set: a file or a named dataset's test split when asked for, else the current held-out set of the
    base model (the newest build's test split: candidate, base and deployed are compared on one set, whatever
    dataset the checkpoint trained on), else the job's own eval snapshot. Whichever it is, the contexts blind-test
    pairs of the base model were made of are set aside (datasets/pair_records.blind_contexts, evalset.set_aside):
    no next action or loss example of an evaluation, or of a blind test, is one a model may have trained on."""
    return set_aside(_chosen(store, target, dataset, file), blind_contexts(store, target.base_model))


def _chosen(store: Store, target: Target, dataset: str | None, file: str | Path | None) -> EvalSet:
    if file:
        path = Path(file).expanduser()
        if not path.is_file():
            raise JudgeError(f"{path} is not a file", fix="pass a chat JSONL file of held-out sessions")
        return EvalSet(path.name, path.resolve(), sha256_file(path))
    reg = Registry(store)
    if dataset:
        ds = reg.get(dataset)
        if ds is None:
            raise JudgeError(f"no dataset named {dataset!r}", fix="see `nightschool dataset list`")
        return _of_dataset(ds)
    if (ds := latest_heldout(store, target.base_model)) is not None:
        return _of_dataset(ds)
    if target.spec and target.spec.eval_path and Path(target.spec.eval_path).is_file():
        path = Path(target.spec.eval_path)
        return EvalSet(f"{target.job.id}/eval", path, sha256_file(path))
    raise JudgeError(f"there is no held-out set for {target.base_model}",
                     why="no built dataset of this base model has a test split, and the job had no eval file",
                     fix="build one (nightschool dataset build) or pass --data FILE")


def _config(target: Target, evset: EvalSet, settings: EvalSettings) -> EvalConfig:
    return EvalConfig(label=target.label, base_model=target.base_model, adapter=target.adapter,
                      adapter_sha256=target.adapter_sha256(), eval_file=str(evset.path), eval_set=evset.name,
                      eval_set_sha256=evset.sha256, schema_files=[str(p) for p in evset.schema_files],
                      settings=settings, gguf_name=target.file_stem, set_aside=sorted(evset.set_aside))


def evaluator_for(choice: str) -> str:
    """The evaluator a judging choice means here: "auto" is transformers with a GPU, llama.cpp on a CPU."""
    if choice != "auto":
        return choice
    return "transformers" if paths.gpu_count() > 0 else "llama.cpp"


def _module(settings: EvalSettings) -> str:
    """The evaluation worker: transformers (engine.workers.evaluate), or llama.cpp on an f16 GGUF the worker converts
    the model to (engine.workers.evaluate_gguf with no file named; GgufEvalConfig's own fields default)."""
    return "engine.workers.evaluate_gguf" if settings.evaluator == "llama.cpp" else "engine.workers.evaluate"


def _labelled(env: P.Envelope, label: str) -> P.Envelope:
    """Progress names the model it is about ("#12 …: generate")."""
    if isinstance(env.body, P.Progress):
        return env.model_copy(update={"body": env.body.model_copy(update={"phase": f"{label}: {env.body.phase}"})})
    return env


@dataclass
class Evaluation:
    """One model's evaluation as a judgement uses it: its row and report, the seconds it took here and whether it
    was reused (cached: the same set, settings and adapter)."""
    row: EvalRow
    report: EvalReport
    seconds: float = 0.0
    reused: bool = False


def evaluate(store: Store, target: Target, evset: EvalSet, settings: EvalSettings | None = None,
             sink: Sink | None = None, force: bool = False, cancel: threading.Event | None = None
             ) -> tuple[EvalRow, EvalReport]:
    """The target's evaluation on `evset` (cached unless `force`); JudgeError with the worker's reason on failure,
    or when `cancel` is set (the worker is stopped; nothing is recorded)."""
    done = evaluate_all(store, [target], evset, settings, sink, force, cancel)[0]
    return done.row, done.report


def evaluate_all(store: Store, targets: list[Target], evset: EvalSet, settings: EvalSettings | None = None,
                 sink: Sink | None = None, force: bool = False, cancel: threading.Event | None = None
                 ) -> list[Evaluation]:
    """Each target's evaluation on `evset`, in order: the cached ones reused (unless `force`), the others in ONE
    worker, one after another (its process start, imports and tokenizer paid once: most of a small model's
    evaluation). A model evaluated before on a set that has grown since measures only what is new in it: the next
    actions and loss examples it had are read from that evaluation's rows, by key. Each is recorded as it ends, so a
    failure or cancel later keeps what finished; JudgeError then."""
    settings = settings or EvalSettings()
    done: dict[int, Evaluation] = {}
    todo: list[tuple[int, EvalConfig]] = []
    for i, target in enumerate(targets):
        config = _config(target, evset, settings)
        if not force and (row := cached_eval(store, target, evset.sha256, config.settings_sha256())) is not None:
            done[i] = Evaluation(row, EvalReport.read(Path(row.report_path)), reused=True)
        else:
            if not force and (prior := cached_eval(store, target, None, config.settings_sha256())) is not None:
                config.reuse = str(Path(prior.report_path).parent)  # the set grew: what is still in it is reused
            todo.append((i, config))
    if todo:
        _run(store, targets, todo, done, sink, cancel)
    return [done[i] for i in range(len(targets))]


def _run(store: Store, targets: list[Target], todo: list[tuple[int, EvalConfig]], done: dict[int, "Evaluation"],
         sink: Sink | None, cancel: threading.Event | None) -> None:
    """The uncached evaluations in one worker (`configs`: evaluated in turn, one `evaluated` envelope each)."""
    settings = todo[0][1].settings
    if sink is not None:
        names = ", ".join(c.label for _, c in todo)
        sink(P.make(P.Log(message=f"evaluating {names} on {todo[0][1].eval_set} through {settings.evaluator}")))
    work = WorkerRun(store, _module(settings), {"configs": [c.model_dump() for _, c in todo]})
    started = [time.monotonic()]

    def seen(env: P.Envelope) -> None:
        n = len([i for i, _ in todo if i in done])
        if n >= len(todo):
            return
        i, config = todo[n]
        if sink is not None:
            sink(_labelled(env, config.label))
        if isinstance(env.body, P.Evaluated):
            row, report = _record(store, targets[i], config, Path(env.body.path))
            now = time.monotonic()
            done[i] = Evaluation(row, report, seconds=round(now - started[0], 1))
            started[0] = now

    try:
        code = work.stream(seen, cancel)
        missing = [config.label for i, config in todo if i not in done]
        if code is None and missing:
            raise JudgeError(f"the evaluation of {missing[0]} was cancelled", why="nothing was recorded for it")
        if missing:
            raise JudgeError(f"evaluating {missing[0]} failed", why=work.failure(code))
    finally:
        work.close()


def _record(store: Store, target: Target, config: EvalConfig, out: Path) -> tuple[EvalRow, EvalReport]:
    report = EvalReport.read(out)
    with store.session() as s:
        row = EvalRow(checkpoint_id=target.id, base_model=target.base_model, label=target.label,
                      adapter_sha256=config.adapter_sha256, eval_set=config.eval_set,
                      eval_set_sha256=config.eval_set_sha256, settings_sha256=config.settings_sha256(),
                      contexts=report.contexts, examples=report.examples, metrics_json=json.dumps(report.metrics),
                      report_path="")
        s.add(row)
        s.flush()
        folder = evals_dir() / f"eval-{row.id}"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.move(str(out), folder)
        row.report_path = str(folder / "report.json")
    return row, report


def generations(row: EvalRow) -> list[dict]:
    """Every next action of an evaluation (key, prompt, teacher, student, outcome, why, reward)."""
    path = Path(row.report_path).with_name("generations.jsonl")
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
