"""One heavy stage at a time, and memory for it: before training the served model leaves memory (parked: the API
answers 503 with Retry-After) and comes back after; on CPU the job's expected peak RAM must fit in what is free."""
from __future__ import annotations

import json

import psutil
from sqlalchemy import select

from app.core.base import paths, settings
from app.core.base.schema import Job
from app.core.base.store import Store
from app.core.runtime.machinery.bus import Bus, Kind
from app.core.runtime.school.policy import Policy

PARKED_KEY = "school.parked"  # the runtime parked the served model (the keeper leaves it so)
DEFAULT_PEAK_MB = 2500  # SmolLM2 LoRA SFT on ~2k-token windows when nothing was measured yet


def expected_peak_mb(policy: Policy, store: Store) -> int:
    """The policy's figure, else the largest RAM a finished job of this base model reported, else a default."""
    if policy.training_peak_mb:
        return policy.training_peak_mb
    with store.session() as s:
        jobs = list(s.scalars(select(Job.id).where(Job.state == "completed").order_by(Job.created_at.desc())
                              .limit(5)))
    seen = [_peak(job_id) for job_id in jobs]
    seen = [x for x in seen if x]
    return int(max(seen) * 1.1) if seen else DEFAULT_PEAK_MB


def _peak(job_id: str) -> float | None:
    path = paths.runs_dir() / job_id / "events.jsonl"
    peak = None
    try:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if '"metrics"' in line:
                    ram = json.loads(line).get("body", {}).get("ram_mb")
                    peak = max(peak or 0.0, ram or 0.0)
    except (OSError, ValueError):
        return None
    return peak


def ram_wait(policy: Policy, store: Store) -> str:
    """Why training must wait for memory ('' when it fits)."""
    need = expected_peak_mb(policy, store)
    free = psutil.virtual_memory().available / 1024**2
    if need > free:
        return (f"waiting for memory: the training job needs about {need:,} MB and {free:,.0f} MB are free; "
                "close other programs (or lower training_peak_mb if the estimate is too high)")
    return ""


def _served_on_gpu(state: dict) -> bool:
    return bool(state.get("gpu_layers") or state.get("device", "cpu") != "cpu")


def before_training(policy: Policy, store: Store, bus: Bus) -> str:
    """Free what training needs; '' when it may start, else why it waits (then the served model stays: a cycle that
    waits for memory does not leave the API answering 503 meanwhile)."""
    from app.core.ship import serving

    if waiting := ram_wait(policy, store):
        return waiting
    state = serving.state()
    if state and not state.get("parked") and (policy.free_served == "always"
                                              or (policy.free_served == "gpu" and _served_on_gpu(state))):
        serving.park()
        settings.put(store, PARKED_KEY, True)
        bus.publish(Kind.SERVER_PARKED, model=(state.get("current") or {}).get("name"),
                    message="the served model left memory for training; the API answers 503 until it is back")
    return ""


def after_training(store: Store, bus: Bus) -> None:
    """Bring the parked model back (its files are hash-checked again)."""
    from app.core.ship import serving

    if not settings.get(store, PARKED_KEY, False):
        return
    state = serving.state()
    if state and state.get("parked"):
        serving.unpark()
    settings.put(store, PARKED_KEY, False)
    bus.publish(Kind.SERVER_RESTORED, model=((serving.state() or {}).get("current") or {}).get("name"),
                message="the served model is back after training")
