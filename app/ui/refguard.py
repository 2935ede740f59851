"""Workaround for a PySide6 6.12.0 refcount bug on Python 3.11: signal emissions and void Qt calls drop references
to None / True / False that were never taken, until Python aborts ("deallocating None"/"bool_dealloc"). We hold
spare references and top them up on a timer; the holder is never freed (freeing it would give the lost counts back
twice), so the cost is 8 bytes per lost reference (about 7 KB per training step watched). Python >= 3.12 makes
these objects immortal and the guard does nothing there."""
from __future__ import annotations

import ctypes
import sys

LOW = 1_000_000  # top up when a singleton's count falls under this
_SPARE: list = []
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_SPARE))  # never deallocated, so its references are never released
_IMMORTAL = sys.version_info >= (3, 12)


def top_up() -> int:
    """Add spare references where a singleton runs low; returns how many were added."""
    if _IMMORTAL:
        return 0
    added = 0
    for obj in (None, True, False):
        count = sys.getrefcount(obj)
        if count < LOW:
            _SPARE.extend([obj] * (2 * LOW - count))
            added += 2 * LOW - count
    return added


def install(parent) -> object:
    """Top up now and every second while `parent` (a QObject) lives; returns the timer."""
    from PySide6.QtCore import QTimer

    top_up()
    timer = QTimer(parent)
    timer.setInterval(1000)
    timer.timeout.connect(top_up)
    timer.start()
    return timer
