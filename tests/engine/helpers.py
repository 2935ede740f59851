"""Helpers for engine tests: wait on a run's events.jsonl (the engine's own record) without sleeping blindly."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Callable

from app.core.train.engine_client import EngineClient
from app.core.train.events import read_events
from app.core.train.spec import JobSpec


def wait_for_events(run_dir: Path, predicate: Callable[[list], bool], timeout: float = 120.0,
                    alive: Callable[[], bool] = lambda: True) -> list:
    """Poll events.jsonl until predicate(events) holds; fail with the tail of the events if it never does."""
    deadline = time.monotonic() + timeout
    while True:
        events = read_events(Path(run_dir) / "events.jsonl")
        if predicate(events):
            return events
        if time.monotonic() > deadline or not alive():
            tail = [(e.type, getattr(e.body, "state", "")) for e in events[-8:]]
            raise AssertionError(f"condition not reached; last events: {tail}")
        time.sleep(0.05)


def of_type(events: list, type_: str) -> list:
    return [e for e in events if e.type == type_]


def states(events: list) -> list[str]:
    return [e.body.state for e in of_type(events, "state")]


def attempts(events: list) -> list[list]:
    """The events of each engine attempt of a run (split at each `starting` state)."""
    out: list[list] = []
    for env in events:
        if env.type == "state" and env.body.state == "starting":
            out.append([])
        if out:
            out[-1].append(env)
    return out


def send_command(manager, job_id: str, command: str) -> None:
    """Send one command to the job's running engine over its socket and check the engine acknowledged it."""
    job, run = manager.job(job_id), manager.latest_run(job_id)
    spec, _ = JobSpec.read(Path(job.spec_path))

    async def go():
        client = EngineClient(run.socket_path, spec.token, job_id)
        await client.connect(since_seq=10**9)
        try:
            ack = await client.command(command)
        finally:
            await client.close()
        assert ack.type == "ack" and ack.body.command == command

    asyncio.run(go())
