"""The queue as rows: running jobs with their live progress, waiting ones with ETAs and start times, recent ends."""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from app.core.base.schema import Job, Run, utcnow
from app.core.queue import eta
from app.core.train import backends
from app.core.train.spec import JobSpec


@dataclass
class Entry:
    """One row of the queue view."""

    job: Job
    place: int | None  # 1.. for running and waiting jobs in run order; None when finished
    state: str  # the job's state; `paused` for a running job whose engine is paused, `starting` while launching
    step: int | None = None
    total: int | None = None
    phase: str | None = None  # of the latest progress: train | load_model | materialise
    eta_s: float | None = None  # how long it has left (running) or will take (waiting)
    starts_in_s: float | None = None  # queued jobs: when it starts; None when held or the queue is paused
    on: str = "local"  # where the engine runs: local, ray or skypilot (chosen when queued, kept in its run dir)


@dataclass
class QueueState:
    """What the view is made from: the queue's jobs by kind and its settings."""

    busy: list[Job]
    waiting: list[Job]  # in run order
    finished: list[Job]  # most recent first
    paused: bool
    slots: int  # jobs that may run at once


class _Sources:
    """The run of a job and the measured throughput of a model, each looked up once per view."""

    def __init__(self, latest_run: Callable[[str], Run | None], throughput: Callable[[str], float]) -> None:
        self.latest_run, self._throughput, self._rates = latest_run, throughput, {}

    def rate(self, model: str) -> float:
        if model not in self._rates:
            self._rates[model] = self._throughput(model)
        return self._rates[model]


def build_entries(state: QueueState, latest_run: Callable[[str], Run | None],
                  throughput: Callable[[str], float]) -> list[Entry]:
    """Running jobs, then waiting ones in run order (with ETAs), then the most recent finished ones."""
    src = _Sources(latest_run, throughput)
    running = [_running(src, job, i) for i, job in enumerate(state.busy, 1)]
    waiting = [Entry(job, len(running) + i, job.state, eta_s=_estimate(src, job))
               for i, job in enumerate(state.waiting, 1)]
    if not state.paused:
        _start_times(running, waiting, state.slots)
    entries = running + waiting + [_finished(src, job) for job in state.finished]
    for entry in entries:  # read here, off the GUI thread: the view only formats
        entry.on = backends.choice_of(Path(entry.job.spec_path).parent) if entry.job.spec_path else "local"
    return entries


def _start_times(running: list[Entry], waiting: list[Entry], slots: int) -> None:
    queued = [e for e in waiting if e.state == "queued"]
    times = eta.start_times([e.eta_s or 0.0 for e in running], [e.eta_s or 0.0 for e in queued], slots)
    for entry, start in zip(queued, times):
        entry.starts_in_s = start


def _running(src: _Sources, job: Job, place: int) -> Entry:
    run = src.latest_run(job.id) if job.state in ("starting", "running") else None
    if run is None:
        return Entry(job, place, "starting", eta_s=_estimate(src, job))
    now = eta.live(Path(run.run_dir) / "events.jsonl")
    state = "paused" if now.engine_state == "paused" else job.state
    left = now.eta_s if now.phase == "train" and now.eta_s is not None else None
    if left is None and (full := _estimate(src, job)) is not None:
        left = full - age_s(run.started_at)
        left = left if left > 0 else None  # over its estimate: unknown until the engine reports progress
    return Entry(job, place, state, now.step, now.total, now.phase, left)


def _finished(src: _Sources, job: Job) -> Entry:
    run = src.latest_run(job.id)
    metrics = _metrics(run.result_json) if run is not None and run.result_json else {}
    steps, planned = metrics.get("steps"), metrics.get("planned_steps")
    return Entry(job, None, job.state, int(steps) if steps is not None else None,
                 int(planned) if planned is not None else None)


def _estimate(src: _Sources, job: Job) -> float | None:
    try:
        spec, _ = JobSpec.read(Path(job.spec_path))
    except (OSError, ValueError):
        return None
    return eta.estimate_s(spec, src.rate(job.model_ref))


def _metrics(raw: str) -> dict:
    try:
        return json.loads(raw).get("metrics") or {}
    except (ValueError, AttributeError):
        return {}


def age_s(when: datetime | None) -> float:
    """Seconds since a stored time (SQLite gives back naive UTC)."""
    if when is None:
        return 0.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return (utcnow() - when).total_seconds()
