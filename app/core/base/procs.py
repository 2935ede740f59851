"""Is a recorded process still the one we started? Its pid plus its start time (a reused pid has another)."""
from __future__ import annotations

import psutil

START_TOLERANCE_S = 1.0  # psutil's create_time is rounded by the kernel's clock ticks


def start_time(pid: int) -> float | None:
    """The process's start time (seconds since the epoch), None when it is gone."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return None


def live_process(pid: object, started: float | None = None) -> psutil.Process | None:
    """The process `pid` if it still runs and, when `started` is known, started then; None when it ended, is a
    zombie (killed but not yet reaped by its parent) or the pid now belongs to another process."""
    if not isinstance(pid, int):
        return None
    try:
        proc = psutil.Process(pid)
        if started and abs(proc.create_time() - started) > START_TOLERANCE_S:
            return None
        return None if proc.status() == psutil.STATUS_ZOMBIE else proc
    except psutil.NoSuchProcess:
        return None
