"""Training controller: queues dropped files, follows each engine's stream (history first, then live) once the queue
starts it, sends commands."""
from __future__ import annotations

import asyncio
import re
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.core.base import protocol as P
from app.core.base.paths import SetupError
from app.core.datafiles.chatfile import DatasetError
from app.core.train.jobs import ACTIVE, JobManager
from app.core.train.modelref import ModelRefError
from app.core.train.spec import DEFAULT_MODEL, Hyper
from app.ui.queue import queued_note

LIVE_STATES = ("starting", "loading", "resuming", "running", "paused", "stopping", "saving")
WAITING_STATES = ("queued", "held", "launching")  # in the queue: not started yet, not final either
# chart series fed by a training step's metrics: (series, Metrics field); reward components are "reward · <name>"
TRAIN_SERIES = (("loss", "loss"), ("lr", "lr"), ("grad norm", "grad_norm"), ("tokens/s", "tokens_per_s"),
                ("RAM", "ram_mb"), ("VRAM", "vram_mb"), ("GPU", "gpu_util"), ("reward", "reward"))
EVAL_SERIES = (("eval loss", "eval_loss"),)
REWARD_PREFIX = "reward · "
DIAGNOSIS_CAP = 256 * 1024  # bytes of diagnosis.md read for the alerts view
_CHECKPOINT_STEP = re.compile(r"checkpoint[^0-9]*(\d+)|(\d+)")


@dataclass
class JobView:
    """What the Training panel knows about one job, built from its events."""

    id: str
    data: str = ""
    state: str = "starting"
    detail: str = ""
    step: int = 0
    total: int = 0
    eta: float | None = None
    loss: float | None = None
    error: str | None = None
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # chart series -> (step, value)
    last_step: dict[str, int] = field(default_factory=dict)  # "train" | "eval" -> step of the last metrics
    alerts: list[P.Alert] = field(default_factory=list)
    resumes: list[int] = field(default_factory=list)  # checkpoint steps the engine resumed from
    metrics_seen: bool = False
    gpu_reported: bool = False  # some metrics carried gpu_util
    events: int = 0
    final: bool = False  # the engine has exited and its result was checked and recorded

    def pts(self, series: str) -> list[tuple[int, float]]:
        return self.series.setdefault(series, [])

    @property
    def loss_pts(self) -> list[tuple[int, float]]:
        return self.pts("loss")

    @property
    def ram_pts(self) -> list[tuple[int, float]]:
        return self.pts("RAM")

    @property
    def vram_pts(self) -> list[tuple[int, float]]:
        return self.pts("VRAM")


class TrainingController(QObject):
    """Model side of the Training panel (napari-style: it emits, the view subscribes)."""

    job_changed = Signal(str)  # a job's row/state changed
    point = Signal(str, str, float, float)  # job id, series (TRAIN_SERIES, EVAL_SERIES, reward · name), x, y
    rewound = Signal(str, str, float)  # job id, series: its points from this step on were dropped (a resume)
    resumed = Signal(str, int)  # job id, checkpoint step the engine resumed from
    alert = Signal(str, int)  # job id, index in JobView.alerts
    message = Signal(str, str)  # level (info | error), text

    def __init__(self, manager: JobManager, hyper: Hyper | None = None, queue=None) -> None:
        super().__init__()
        self.manager = manager
        self.hyper = hyper or Hyper()
        self.queue = queue  # app.ui.queue.QueueController: files dropped here are queued through it
        self.jobs: dict[str, JobView] = {}
        self._followers: dict[str, object] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._seq: dict[str, int] = {}  # job id -> last event seq seen (a retried job appends to the same file)
        self._runs: dict[str, int] = {}  # job id -> the run last followed

    # --- starting and attaching --------------------------------------------------------------
    def attach_all(self) -> None:
        """Reconcile the store, then replay every job's history and re-attach to the running ones."""
        self.manager.reconcile()
        for job in reversed(self.manager.jobs()):
            self._track(job)

    def start_file(self, path: str | Path, model: str = DEFAULT_MODEL) -> str | None:
        """Check the file and queue a job on it (the queue starts it); a refused file gives an error message."""
        if self.queue is None:
            self.message.emit("error", "Not queued — this window has no queue to add the job to.")
            return None
        try:
            job = self.queue.add_now(path, model=model or DEFAULT_MODEL, hyper=self.hyper)
        except (DatasetError, ModelRefError, SetupError, OSError, ValueError) as exc:
            self.message.emit("error", f"Not queued — {exc}")
            return None
        self.message.emit("info", queued_note(job, Path(path), self.queue.paused))
        self._track(job)
        return job.id

    def track(self, job_id: str) -> None:
        """Show a job the queue added or started (or another process did) and follow its engine once it has one."""
        task = self._tasks.get(job_id)
        if task is not None and not task.done():
            return
        try:
            self._track(self.manager.job(job_id))
        except KeyError:
            pass

    def sync(self, entries: list) -> None:
        """Queue entries -> views: new jobs appear, started ones are followed, waiting/ended ones get their state."""
        for entry in entries:
            job, view = entry.job, self.jobs.get(entry.job.id)
            task = self._tasks.get(job.id)
            if task is not None and not task.done():
                continue  # followed: its events tell its state
            if view is None or job.state in ACTIVE:
                self.track(job.id)
            elif view.state != job.state:
                view.state, view.final = job.state, job.state not in LIVE_STATES + WAITING_STATES
                view.error = job.error if job.state == "failed" else None
                self.job_changed.emit(job.id)

    def _track(self, job) -> None:
        view = self.jobs.get(job.id)  # kept when a queued job starts: the panel and callers hold it
        if view is None:
            view = self.jobs[job.id] = JobView(id=job.id, data=f"{Path(job.dataset_path).name} · {job.model_ref}")
        view.state, view.final = job.state, job.state not in LIVE_STATES + WAITING_STATES
        view.error = job.error if job.state == "failed" else None
        self.job_changed.emit(job.id)
        run = self.manager.latest_run(job.id)
        if run is not None and (job.state in ACTIVE or self._runs.get(job.id) is None) \
                and self._runs.get(job.id) != run.id:
            self._tasks[job.id] = asyncio.ensure_future(self._follow(job.id))

    async def _follow(self, job_id: str) -> None:
        last_seq = self._seq.get(job_id, 0)
        while True:
            run_id = self.manager.latest_run(job_id).id
            self._runs[job_id] = run_id
            follower = self.manager.follower(job_id, lambda env: self._on_event(job_id, env))
            follower.last_seq = last_seq  # a resumed engine appends to the same events file: no replay twice
            self._followers[job_id] = follower
            await follower.run()
            last_seq = self._seq[job_id] = follower.last_seq
            self._followers.pop(job_id, None)
            job = await self._ended(job_id, run_id)
            if job.state in LIVE_STATES and self.manager.latest_run(job_id).id != run_id:
                continue  # the engine crashed and was restarted: it resumes from its last checkpoint
            break
        view = self.jobs[job_id]
        view.state, view.final = job.state, job.state not in LIVE_STATES + WAITING_STATES
        view.error = job.error if job.state == "failed" else None
        self.job_changed.emit(job_id)
        if job.state == "failed":
            self.message.emit("error", f"Job {job_id} failed: {(job.error or '').splitlines()[0]}")

    async def _ended(self, job_id: str, run_id: int):
        """The job once its engine has exited. With a queue its scheduler finalises it on its own thread (validating
        and hashing the result, restarting a crashed engine): finalising here too could race it and wait on the
        restarted engine's process on the GUI thread."""
        if self.queue is None:
            return self.manager.finalise(job_id)
        while True:
            job = self.manager.job(job_id)
            if job.state not in ACTIVE or self.manager.latest_run(job_id).id != run_id:
                return job
            self.queue.tick()
            await asyncio.sleep(0.2)

    # --- commands ----------------------------------------------------------------------------
    def command(self, job_id: str, command: str) -> None:
        follower = self._followers.get(job_id)
        if follower is None or not follower.connected:
            self.message.emit("error", f"Job {job_id} is not running: nothing to {command}.")
            return
        asyncio.ensure_future(follower.send(command))

    def detach(self) -> None:
        """Stop following (window closing); the engines keep running."""
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
        self._followers.clear()

    # --- events ------------------------------------------------------------------------------
    def _on_event(self, job_id: str, env: P.Envelope) -> None:
        view = self.jobs[job_id]
        view.events += 1
        body = env.body
        if env.type == "state":
            view.state, view.detail = body.state, body.detail
            if body.state == "resuming":
                self._on_resuming(job_id, view, body.detail)
        elif env.type == "progress" and body.phase == "train":
            view.step, view.total, view.eta = body.step, body.total, body.eta_s
        elif env.type == "metrics":
            self._on_metrics(job_id, view, body)
            return
        elif env.type == "log" and view.state in ("starting", "loading"):
            view.detail = body.message  # e.g. the one-time model materialisation steps
        elif env.type == "alert":
            view.alerts.append(body)
            self.alert.emit(job_id, len(view.alerts) - 1)
            return
        elif env.type == "error":
            view.error = f"{body.message}. {body.why} {body.fix}".strip()
        else:
            return
        self.job_changed.emit(job_id)

    def _on_metrics(self, job_id: str, view: JobView, m: P.Metrics) -> None:
        """Each series keeps the latest value per step: metrics for a step already plotted (a resumed engine
        re-emits the steps after its checkpoint) first drop that group's points from that step on."""
        train = [(name, getattr(m, key)) for name, key in TRAIN_SERIES]
        train += [(REWARD_PREFIX + name.removeprefix("reward_"), value) for name, value in m.rewards.items()]
        evals = [(name, getattr(m, key)) for name, key in EVAL_SERIES]
        flagged = set(m.nonfinite)
        groups = {"train": any(v is not None for _, v in train) or bool(flagged - {"eval_loss"}),
                  "eval": m.eval_loss is not None or "eval_loss" in flagged}
        view.metrics_seen = True
        view.gpu_reported = view.gpu_reported or m.gpu_util is not None
        for group, present in groups.items():
            if not present:
                continue
            last = view.last_step.get(group)
            if last is not None and m.step <= last:
                names = [n for n in view.series if (n == "eval loss") == (group == "eval")]
                self._rewind(job_id, view, names, m.step)
            view.last_step[group] = m.step
        for name, value in train + evals:
            if value is not None:
                view.pts(name).append((m.step, value))
                self.point.emit(job_id, name, float(m.step), float(value))
        if m.loss is not None:
            view.loss = m.loss
            self.job_changed.emit(job_id)

    def _on_resuming(self, job_id: str, view: JobView, detail: str) -> None:
        """The engine resumes from a checkpoint: it will report the steps after it again, so they are dropped."""
        match = _CHECKPOINT_STEP.search(detail or "")
        if match is None:
            return
        step = int(match.group(1) or match.group(2))
        view.resumes.append(step)
        self._rewind(job_id, view, list(view.series), step + 1)
        for group, last in list(view.last_step.items()):
            view.last_step[group] = min(last, step)
        self.resumed.emit(job_id, step)

    def _rewind(self, job_id: str, view: JobView, names: list[str], step: int) -> None:
        for name in names:
            pts = view.series.get(name)
            if pts and pts[-1][0] >= step:
                del pts[bisect_left(pts, step, key=lambda p: p[0]):]
                self.rewound.emit(job_id, name, float(step))


def read_diagnosis(alert: P.Alert, cap: int = DIAGNOSIS_CAP) -> str:
    """Markdown for one alert: its section of the run's diagnosis.md (the whole file when no section matches),
    read up to `cap` bytes; the alert's own message when there is no file."""
    head = f"**{alert.severity.upper()}** · {alert.kind}"
    head += f" · step {alert.step}" if alert.step is not None else ""
    if not alert.diagnosis_path:
        return f"{head}\n\n{alert.message}\n\n*No diagnosis file was written for this alert.*"
    path = Path(alert.diagnosis_path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(cap + 1)
    except OSError as exc:
        return f"{head}\n\n{alert.message}\n\n*The diagnosis could not be read: {exc.strerror or exc}.*"
    text = raw[:cap].decode("utf-8", errors="replace")
    note = f"\n\n*Only the first {cap // 1024} KB of the diagnosis are shown.*" if len(raw) > cap else ""
    section = _section(text, alert)
    return (section or text) + note


def _section(text: str, alert: P.Alert) -> str | None:
    """The last '## SEVERITY kind at step N' section of diagnosis.md that belongs to this alert."""
    where = f"at step {alert.step}" if alert.step is not None else "at no step yet"
    wanted = f" {alert.kind} {where} "
    sections = re.split(r"(?m)^(?=## )", text)
    found = [part for part in sections if part.startswith("## ") and wanted in part.splitlines()[0] + " "]
    return "####" + found[-1][2:].rstrip() if found else None  # a smaller heading: it is one alert of the file
