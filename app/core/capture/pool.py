"""Prepare workers: other processes parse, scrub and make the rows of a scan's transcripts while one process writes
them, so a first scan of a year's history uses every core (bench/README.md "Ingest")."""
from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from app.core.capture.prepare import Prepared, prepare
from app.core.capture.sources import CaptureConfig
from app.core.scrub.scrubber import Compiled, Scrubber, compiled_rules, use_rules

MAX_WORKERS = 8
NICE = 5  # the workers yield to the desktop: a scan runs in the background

_config: CaptureConfig | None = None
_scrubber: Scrubber | None = None


def default_workers() -> int:
    """One per core, up to MAX_WORKERS (the writes, in the scan's process, are a third of an ingest's work)."""
    return min(os.cpu_count() or 1, MAX_WORKERS)


class PreparePool:
    """Worker processes (spawned: the caller may hold threads and a database) with the scan's capture settings and a
    scrubber for the same home; `submit` answers a Future of (Prepared with its rows, what the scrubber replaced)."""

    def __init__(self, workers: int, config: CaptureConfig, home: str) -> None:
        self._pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_start, initargs=(config, home, compiled_rules()))

    def warm(self) -> PreparePool:
        """Start every worker now (each imports the capture, no SQLAlchemy, and takes the scrubber's rules as this
        process compiled them: ~0.2 s)."""
        for _ in range(self._pool._max_workers):
            self._pool.submit(_warm)
        return self

    def submit(self, main: Path, agent: str, final: bool, key: str) -> Future:
        return self._pool.submit(_prepare, main, agent, final, key)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _start(config: CaptureConfig, home: str, rules: Compiled) -> None:
    global _config, _scrubber
    use_rules(rules)
    _config, _scrubber = config, Scrubber(home)
    if hasattr(os, "nice"):
        os.nice(NICE)
    threading.Thread(target=_end_with, args=(multiprocessing.parent_process(),), daemon=True).start()


def _end_with(parent) -> None:
    """A worker's watch on the scan's process: when it is gone (killed mid-scan), so is the worker (the pool's
    queues are shared with the other workers, so no end of file would ever tell it)."""
    parent.join()
    os._exit(1)


def _warm() -> None:
    _scrubber.text("loads the rules' database")


def _prepare(main: Path, agent: str, final: bool, key: str) -> tuple[Prepared, dict[str, int]]:
    """In a worker: the file prepared, its rows made for the id `key`, and the scrubber's counts for it by kind."""
    _scrubber.report.counts.clear()
    ready = prepare(main, agent, final, _config, _scrubber).with_rows(key)
    if ready.spill is not None:  # grown past SPILL_FILE_BYTES since it was planned: its messages are in the rows now
        ready.spill.close()
        ready.spill = None
    return ready, dict(_scrubber.report.counts)
