"""Training controller: queues dropped files, follows each engine's stream (history first, then live) once the queue
starts it, sends commands."""
from __future__ import annotations

import asyncio
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.core.base import protocol
from app.core.base.paths import SetupError
from app.core.datafiles.chatfile import DatasetError
from app.core.train.jobs import ACTIVE, JobManager
from app.core.train.modelref import ModelRefError
from app.core.train.spec import DEFAULT_MODEL, Hyper
from app.core.train.view import LIVE_STATES, JobView, apply
from app.ui.queue.controller import queued_note


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
        self.queue = queue  # app.ui.queue.controller.QueueController: files dropped here are queued through it
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
                view.set_job_state(job.state, job.error)
                self.job_changed.emit(job.id)

    def _track(self, job) -> None:
        view = self.jobs.get(job.id)  # kept when a queued job starts: the panel and callers hold it
        if view is None:
            view = self.jobs[job.id] = JobView(id=job.id, data=f"{Path(job.dataset_path).name} · {job.model_ref}")
        view.set_job_state(job.state, job.error)
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
        self.jobs[job_id].set_job_state(job.state, job.error)
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
    def _on_event(self, job_id: str, env: protocol.Envelope) -> None:
        """The shared view folds the event in; the signals tell the panel what to redraw."""
        update = apply(self.jobs[job_id], env)
        for name, step in update.rewound:
            self.rewound.emit(job_id, name, float(step))
        if update.resumed is not None:
            self.resumed.emit(job_id, update.resumed)
        for name, step, value in update.points:
            self.point.emit(job_id, name, float(step), value)
        if update.alert is not None:
            self.alert.emit(job_id, update.alert)
        if update.changed:
            self.job_changed.emit(job_id)
