"""Helpers for engine tests: wait on a run's events.jsonl (the engine's own record) without sleeping blindly."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from app.core.events import read_events


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
