"""Python's cycle collector runs on the GUI thread only: Qt objects caught in reference cycles (controllers with their
timers, wizard pages, chart items) are destroyed where Qt allows it, never on the worker thread that happened to
allocate when a collection fell due (a widget or a live timer destroyed there crashes the app with a segfault).
pyqtgraph's GarbageCollector does it: automatic collection off, a timer collects what is due on the GUI thread."""
from __future__ import annotations

import gc

INTERVAL_S = 1.0
_collector = None  # pyqtgraph.util.garbage_collector.GarbageCollector while installed


def install(interval_s: float = INTERVAL_S):
    """Collect on a timer of the calling (GUI) thread from now on; once per process. Returns the collector."""
    global _collector
    if _collector is None:
        from pyqtgraph.util.garbage_collector import GarbageCollector

        _collector = GarbageCollector(interval=interval_s)
    return _collector


def installed() -> bool:
    return _collector is not None


def collect_due() -> None:
    """What the timer does, now, on the calling thread (which must be the GUI thread): the generations due."""
    if _collector is not None:
        _collector.check()


def uninstall() -> None:
    """Automatic collection back on (the end of the GUI tests)."""
    global _collector
    if _collector is not None:
        _collector.timer.stop()
        _collector = None
        gc.collect()
        gc.enable()
