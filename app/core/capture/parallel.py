"""A big scan's sessions prepared (parsed, counted, scrubbed) in worker processes while this one writes them.

Reading is most of an ingest and each session is read on its own, so a scan of many megabytes (the first scan of a
year's history, an import) hands `prepare` to a pool of processes; the store's writes stay in the calling process,
in the same order and batches as a serial scan, so the rows are the same. Workers start with `spawn` (never `fork`:
the app has threads) and import only capture and the scrubber. `NIGHTSCHOOL_INGEST_PROCESSES` sets how many (0 or 1:
none); by default one per core up to `MAX_PROCESSES`, and only for a scan of at least `MIN_FILES` files and
`MIN_BYTES` (one huge file is read here, streamed, its progress shown).
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from app.core.capture.prepare import Prepared, prepare
from app.core.capture.sources import CaptureConfig
from app.core.scrub.scrubber import Scrubber

ENV = "NIGHTSCHOOL_INGEST_PROCESSES"
MAX_PROCESSES = 8
MIN_BYTES = 32 * 1024**2  # below this a serial scan is done before the workers have started (~1 s each)
MIN_FILES = 8

_scrubber: Scrubber | None = None  # a worker's own


def processes(to_read: int, files: int) -> int:
    """How many worker processes a scan of `files` files that reads `to_read` bytes gets (0: read in this one)."""
    wanted = os.environ.get(ENV, "").strip()
    if wanted:
        try:
            count = int(wanted)
        except ValueError:
            count = 0
        return count if count > 1 else 0
    if to_read < MIN_BYTES or files < MIN_FILES:
        return 0
    count = min(os.cpu_count() or 1, MAX_PROCESSES)
    return count if count > 1 else 0


def pool(count: int, home: str) -> ProcessPoolExecutor:
    """`count` spawned workers, each with a Scrubber for `home` (the rules compile on a worker's first text)."""
    return ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn"), initializer=_start,
                               initargs=(home,))


def submit(workers: ProcessPoolExecutor, main: Path, agent: str, final: bool, config: CaptureConfig) -> Future:
    """prepare() of one session in a worker; its future gives the Prepared (or raises what prepare raised)."""
    return workers.submit(_prepare, main, agent, final, config.model_dump())


def _start(home: str) -> None:
    global _scrubber
    _scrubber = Scrubber(home)


def _prepare(main: Path, agent: str, final: bool, config: dict) -> Prepared:
    return prepare(main, agent, final, CaptureConfig.model_validate(config), _scrubber or Scrubber())
