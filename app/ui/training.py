"""Training controller: starts jobs, follows each engine's stream (history first, then live), sends commands."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.core import protocol as P
from app.core.chatdata import DatasetError
from app.core.paths import SetupError
from app.core.jobs import JobManager
from app.core.modelref import ModelRefError
from app.core.spec import DEFAULT_MODEL, Hyper

LIVE_STATES = ("starting", "loading", "running", "paused", "stopping", "saving")


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
    loss_pts: list[tuple[int, float]] = field(default_factory=list)
    ram_pts: list[tuple[int, float]] = field(default_factory=list)
    vram_pts: list[tuple[int, float]] = field(default_factory=list)
    events: int = 0
    final: bool = False  # the engine has exited and its result was checked and recorded


class TrainingController(QObject):
    """Model side of the Training panel (napari-style: it emits, the view subscribes)."""

    job_changed = Signal(str)  # a job's row/state changed
    point = Signal(str, str, float, float)  # job id, series (loss | RAM | VRAM), x, y
    message = Signal(str, str)  # level (info | error), text

    def __init__(self, manager: JobManager, hyper: Hyper | None = None) -> None:
        super().__init__()
        self.manager = manager
        self.hyper = hyper or Hyper()
        self.jobs: dict[str, JobView] = {}
        self._followers: dict[str, object] = {}
        self._tasks: dict[str, asyncio.Task] = {}

    # --- starting and attaching --------------------------------------------------------------
    def attach_all(self) -> None:
        """Reconcile the store, then replay every job's history and re-attach to the running ones."""
        self.manager.reconcile()
        for job in reversed(self.manager.jobs()):
            self._track(job)

    def start_file(self, path: str | Path, model: str = DEFAULT_MODEL) -> str | None:
        """Check the file and start a job on it; a refused file gives an error message, not an exception."""
        try:
            job = self.manager.submit(path, model=model or DEFAULT_MODEL, hyper=self.hyper)
        except (DatasetError, ModelRefError, SetupError, OSError) as exc:
            self.message.emit("error", f"Not started — {exc}")
            return None
        note = f" ({job.error})" if job.error else ""
        self.message.emit("info", f"Started job {job.id}: {job.records} records from {Path(path).name}{note}")
        self._track(job)
        return job.id

    def _track(self, job) -> None:
        view = JobView(id=job.id, data=f"{Path(job.dataset_path).name} · {job.model_ref}", state=job.state,
                       error=job.error if job.state == "failed" else None, final=job.state not in LIVE_STATES)
        self.jobs[job.id] = view
        self.job_changed.emit(job.id)
        if self.manager.latest_run(job.id) is not None:
            self._tasks[job.id] = asyncio.ensure_future(self._follow(job.id))

    async def _follow(self, job_id: str) -> None:
        follower = self.manager.follower(job_id, lambda env: self._on_event(job_id, env))
        self._followers[job_id] = follower
        await follower.run()
        self._followers.pop(job_id, None)
        job = self.manager.finalise(job_id)
        view = self.jobs[job_id]
        view.state, view.final = job.state, job.state not in LIVE_STATES
        view.error = job.error if job.state == "failed" else None
        self.job_changed.emit(job_id)
        if job.state == "failed":
            self.message.emit("error", f"Job {job_id} failed: {(job.error or '').splitlines()[0]}")

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
        elif env.type == "progress" and body.phase == "train":
            view.step, view.total, view.eta = body.step, body.total, body.eta_s
        elif env.type == "metrics":
            self._on_metrics(job_id, view, body)
            return
        elif env.type == "log" and view.state in ("starting", "loading"):
            view.detail = body.message  # e.g. the one-time model materialisation steps
        elif env.type == "error":
            view.error = f"{body.message}. {body.why} {body.fix}".strip()
        else:
            return
        self.job_changed.emit(job_id)

    def _on_metrics(self, job_id: str, view: JobView, m: P.Metrics) -> None:
        for series, value, pts in (("loss", m.loss, view.loss_pts), ("RAM", m.ram_mb, view.ram_pts),
                                   ("VRAM", m.vram_mb, view.vram_pts)):
            if value is not None:
                pts.append((m.step, value))
                self.point.emit(job_id, series, float(m.step), float(value))
        if m.loss is not None:
            view.loss = m.loss
            self.job_changed.emit(job_id)
