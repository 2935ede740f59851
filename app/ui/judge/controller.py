"""Judge controller: lists checkpoints, compares them on a worker thread, and promotes / rolls back through the gate."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from PySide6.QtCore import Signal

from app.core.base import protocol
from app.core.judge import deployment, promote, records
from app.core.judge.evaluate import generations
from app.core.judge.report import METRICS, EvalSettings, places
from app.core.runtime.school import policy
from app.core.train.events import read_events
from app.core.train.jobs import JobManager
from app.ui.background import BackgroundController

SCORE = ("score", "composite score", "higher")  # the ranking's number, shown as the table's last row
ROWS = [(key, words, better) for key, (words, better) in METRICS.items()] + [SCORE]


@dataclass
class Choice:
    """One model the user can tick: a base model ("base:MODEL") or a registered checkpoint ("#ID")."""

    ref: str
    label: str
    base_model: str
    checkpoint_id: int | None = None


@dataclass
class Column:
    """One compared model: its metrics, composite score, sample generations by key and training-loss curve."""

    ref: str
    label: str  # "#12 <job id> step 10"
    short: str  # "#12 step 10": the table's, chart's and side-by-side's name for it
    checkpoint_id: int | None
    metrics: dict
    score: float
    cases: dict = field(default_factory=dict)  # key -> {prompt, teacher, student, outcome}
    curve: tuple[list, list] = ([], [])


@dataclass
class Comparison:
    base_model: str
    eval_set: str
    columns: list[Column]  # in the user's order
    ranking: list[Column]  # best composite score first
    reference: int  # index into columns: the base model when compared, else the first


@dataclass
class Judged:
    """A promotion attempt: the gate's verdict in words, and whether the deployed pointer moved."""

    label: str
    verdict: str
    summary: str
    reasons: list[str]
    promoted: bool
    checks: list[dict] = field(default_factory=list)  # each check: metric, against, status, ok, text (with its CI)
    notes: list[str] = field(default_factory=list)  # why it is inconclusive


def first_words(ranking: list[Column]) -> str:
    """Who ranks first, or who ties for first (equal composite scores as shown, 3 decimals)."""
    first = [c for c, place in zip(ranking, places([c.score for c in ranking])) if place == 1]
    score = f"{ranking[0].score:.3f}"
    if len(first) == 1:
        return f"{first[0].label} ranks first ({score})"
    if len(first) == len(ranking):
        return f"{'both' if len(first) == 2 else f'all {len(first)}'} tie ({score})"
    return f"{', '.join(c.label for c in first[:-1])} and {first[-1].label} tie for first ({score})"


def short_model(name: str) -> str:
    return Path(name).name if "/" in name else name


class JudgeController(BackgroundController):
    """Model side of the Judge tab: it emits, the view subscribes; every core call runs on a worker thread."""

    choices_changed = Signal(object)  # list[Choice]
    deployed_changed = Signal(object)  # {base model: label of what is deployed}
    progress = Signal(str, int, int)  # phase, step, total (an evaluation running in the engine's worker)
    compared = Signal(object)  # Comparison
    judged = Signal(object)  # Judged

    def __init__(self, store, file: str | None = None, dataset: str | None = None,
                 settings: EvalSettings | None = None) -> None:
        super().__init__()
        self.store, self.file, self.dataset, self.settings = store, file, dataset, settings
        self.choices: list[Choice] = []
        self.comparison: Comparison | None = None
        self.deployed: dict[str, str] = {}
        self._cancel = threading.Event()  # set on stop(): a running evaluation worker is terminated

    # --- threads -------------------------------------------------------------------------------------
    def _run(self, work: Callable, done: Callable, failed: str, name: str) -> bool:
        """work() on a thread, then done(result) here; a refusal comes back as `failed — why`."""
        if self.busy:
            self.message.emit("error", "The Judge tab is busy: wait for the running comparison or promotion.")
            return False
        self._set_busy(True)
        self._background(name, work, done, failed)
        return True

    def _sink(self, env: protocol.Envelope) -> None:
        """Progress envelopes of the engine's evaluation worker (called on the worker thread)."""
        if env.type == "progress" and isinstance(env.body, protocol.Progress):
            self._post(self.progress.emit, (env.body.phase, env.body.step, env.body.total))

    def stop(self) -> None:
        """Window closing: a running evaluation's worker is stopped, results still in flight are dropped."""
        self._closed = True
        self._cancel.set()

    # --- listing -------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the registered checkpoints and what is deployed, on a thread."""
        def read():
            choices = read_choices(self.store)
            return choices, read_deployed(self.store, choices)
        threading.Thread(target=lambda: self._post(self._on_listed, (read(),)), name="judge-list",
                         daemon=True).start()

    def _on_listed(self, listed) -> None:
        self.choices, deployed = listed
        self.choices_changed.emit(self.choices)
        self._on_deployed(deployed)

    def _on_deployed(self, deployed: dict) -> None:
        self.deployed = deployed
        self.deployed_changed.emit(deployed)

    # --- comparing, promoting, rolling back --------------------------------------------------------------
    def compare(self, refs: list[str]) -> bool:
        """Evaluate (or reuse the cached evaluations of) each model on one held-out set; `compared` follows."""
        if len(refs) < 2:
            self.message.emit("error", "Tick two or more models to compare (the base model counts).")
            return False
        return self._run(lambda: self._compare(list(refs)), self._on_compared, "Not compared", "judge-compare")

    def _judging(self) -> EvalSettings:
        """As a cycle judges on this machine (the school policy's judge_* keys), unless the tab was given settings."""
        return self.settings or policy.judge_settings(policy.load(self.store))

    def _compare(self, refs: list[str]) -> Comparison:
        found = promote.compare(self.store, [records.resolve(self.store, r) for r in refs], self.dataset, self.file,
                                self._judging(), self._sink, self._cancel)
        jobs = JobManager(self.store)
        ranking = [column_of(c, jobs) for c in found]
        by_id = {c.checkpoint_id: c for c in ranking}
        ids = [records.resolve(self.store, r).id for r in refs]
        columns = [by_id[i] for i in ids if i in by_id]
        reference = next((n for n, c in enumerate(columns) if c.checkpoint_id is None), 0)
        first = found[0]
        return Comparison(first.target.base_model, first.report.eval_set, columns, ranking, reference)

    def _on_compared(self, comparison: Comparison) -> None:
        self.comparison = comparison
        self.compared.emit(comparison)
        self.message.emit("info", f"Compared {len(comparison.columns)} models on {comparison.eval_set}: "
                                  f"{first_words(comparison.ranking)}.")

    def promote(self, ref: str) -> bool:
        """Through the gate: the verdict is recorded either way; only a pass moves the deployed pointer."""
        def work() -> tuple[Judged, dict]:
            judgement, row = promote.promote(self.store, records.resolve(self.store, ref), self.dataset, self.file,
                                             self._judging(), self._sink, self._cancel)
            v = judgement.verdict
            done = Judged(judgement.target.label, v.verdict, v.summary(), v.reasons, row is not None,
                          [c.model_dump() for c in v.checks], list(v.notes))
            return done, read_deployed(self.store, self.choices)
        return self._run(work, self._on_judged, "Not promoted", "judge-promote")

    def _on_judged(self, result: tuple[Judged, dict]) -> None:
        judged, deployed = result
        self.judged.emit(judged)
        self._on_deployed(deployed)
        if judged.promoted:
            self.message.emit("info", f"Promoted {judged.label}: it is what is deployed now.")
        else:
            self.message.emit("error", f"{judged.label} was not promoted: the gate's verdict is "
                                       f"{judged.verdict.replace('_', ' ')} (its reasons are under Promote).")

    def rollback(self, base_model: str) -> bool:
        """Deploy again what the current promotion replaced (or the base model)."""
        def work() -> tuple[str, dict]:
            row = deployment.rollback(self.store, base_model)
            return row.note, read_deployed(self.store, self.choices)
        return self._run(work, self._on_rolled_back, "Not rolled back", "judge-rollback")

    def _on_rolled_back(self, result: tuple[str, dict]) -> None:
        note, deployed = result
        self._on_deployed(deployed)
        self.message.emit("info", note[0].upper() + note[1:] + ".")


# --- reading (worker threads) -------------------------------------------------------------------------

def read_choices(store) -> list[Choice]:
    """A base entry per base model with checkpoints (the embedded default when there are none), then checkpoints."""
    targets = records.all_checkpoints(store)
    models = list(dict.fromkeys(t.base_model for t in targets)) or ["default"]
    bases = [Choice(f"base:{m}", f"base ({short_model(m)})", m) for m in models]
    return bases + [Choice(f"#{t.id}", t.label, t.base_model, t.id) for t in targets]


def read_deployed(store, choices: list[Choice]) -> dict[str, str]:
    labels = {c.checkpoint_id: c.label for c in choices if c.checkpoint_id is not None}
    out = {}
    for model in dict.fromkeys(c.base_model for c in choices):
        row = deployment.deployed(store, model)
        if row is None:
            out[model] = "the base model (nothing promoted yet)"
        else:
            out[model] = ("the base model" if row.checkpoint_id is None
                          else labels.get(row.checkpoint_id, f"#{row.checkpoint_id}"))
    return out


def column_of(found: promote.Compared, jobs: JobManager) -> Column:
    target = found.target
    ref = f"base:{target.base_model}" if target.is_base else f"#{target.id}"
    return Column(ref, target.label, short_label(target), target.id, dict(found.report.metrics), found.score,
                  cases_of(found), loss_curve(jobs, target))


def short_label(target: records.Target) -> str:
    """The label without the job id (the checkpoint id alone is unique)."""
    if target.is_base:
        return "base"
    ck = target.checkpoint
    return f"#{ck.id} " + ("final" if ck.kind == "adapter" else f"step {ck.step}")


def cases_of(found: promote.Compared) -> dict[str, dict]:
    """Every next action of the evaluation by key (from generations.jsonl), the report's fixed samples first."""
    cases = {s.key: s.model_dump() for s in found.report.samples}
    for row in generations(found.eval):
        cases.setdefault(row.get("key", ""), row)
    return cases


def loss_curve(jobs: JobManager, target: records.Target) -> tuple[list, list]:
    """The training loss of the checkpoint's job up to its step (a resumed run's steps replace the earlier ones)."""
    if target.is_base or target.job is None:
        return [], []
    points: dict[int, float] = {}
    for run in jobs.runs(target.job.id):
        for env in read_events(Path(run.run_dir) / "events.jsonl"):
            body = env.body
            if env.type == "metrics" and isinstance(body, protocol.Metrics) and body.loss is not None:
                points[body.step] = body.loss
    last = target.checkpoint.step if target.checkpoint.kind == "checkpoint" else None
    steps = sorted(s for s in points if last is None or s <= last)
    return steps, [points[s] for s in steps]
