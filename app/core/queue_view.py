"""The queue as rows: running jobs with their live progress, waiting ones with ETAs and start times, recent ends."""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from app.core import queue_eta as eta
from app.core.schema import Job, utcnow
from app.core.spec import JobSpec

if TYPE_CHECKING:
    from app.core.queue import Queue


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


def build_entries(queue: Queue, finished: int) -> list[Entry]:
    """Running jobs, then waiting ones in run order (with ETAs), then the most recent finished ones."""
    rates: dict[str, float] = {}
    running = [_running(queue, job, i, rates) for i, job in enumerate(queue.busy(), 1)]
    waiting = [Entry(job, len(running) + i, job.state, eta_s=_estimate(queue, job, rates))
               for i, job in enumerate(queue.waiting(), 1)]
    if not queue.paused():
        _start_times(running, waiting, queue.max_concurrent())
    done = [_finished(queue, job) for job in queue.finished(finished)] if finished > 0 else []
    return running + waiting + done


def _start_times(running: list[Entry], waiting: list[Entry], slots: int) -> None:
    queued = [e for e in waiting if e.state == "queued"]
    times = eta.start_times([e.eta_s or 0.0 for e in running], [e.eta_s or 0.0 for e in queued], slots)
    for entry, start in zip(queued, times):
        entry.starts_in_s = start


def _running(queue: Queue, job: Job, place: int, rates: dict) -> Entry:
    run = queue.manager.latest_run(job.id) if job.state in ("starting", "running") else None
    if run is None:
        return Entry(job, place, "starting", eta_s=_estimate(queue, job, rates))
    now = eta.live(Path(run.run_dir) / "events.jsonl")
    state = "paused" if now.engine_state == "paused" else job.state
    left = now.eta_s if now.phase == "train" and now.eta_s is not None else None
    if left is None and (full := _estimate(queue, job, rates)) is not None:
        left = full - age_s(run.started_at)
        left = left if left > 0 else None  # over its estimate: unknown until the engine reports progress
    return Entry(job, place, state, now.step, now.total, now.phase, left)


def _finished(queue: Queue, job: Job) -> Entry:
    run = queue.manager.latest_run(job.id)
    metrics = _metrics(run.result_json) if run is not None and run.result_json else {}
    steps, planned = metrics.get("steps"), metrics.get("planned_steps")
    return Entry(job, None, job.state, int(steps) if steps is not None else None,
                 int(planned) if planned is not None else None)


def _estimate(queue: Queue, job: Job, rates: dict) -> float | None:
    try:
        spec, _ = JobSpec.read(Path(job.spec_path))
    except (OSError, ValueError):
        return None
    if job.model_ref not in rates:
        rates[job.model_ref] = eta.throughput(queue.store, job.model_ref)
    return eta.estimate_s(spec, rates[job.model_ref])


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
