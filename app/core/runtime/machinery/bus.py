"""The runtime's event bus: loops publish events (dicts with a type), views subscribe; the recent ones are kept."""
from __future__ import annotations

import collections
import itertools
import threading
import time
from typing import Callable

Event = dict
# Events a person is told about (the tray notifies, the window shows a banner).
NOTIFY = ("cycle.done", "cycle.refused", "cycle.failed", "approval.waiting", "alert.fatal", "stage.failed")


class Bus:
    """Thread-safe publish/subscribe; each event gets a sequence number and a time."""

    def __init__(self, keep: int = 500) -> None:
        self._subs: list[Callable[[Event], None]] = []
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self.recent: collections.deque[Event] = collections.deque(maxlen=keep)
        self.changed = threading.Condition()

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        with self._lock:
            self._subs.append(callback)
        return lambda: self._unsubscribe(callback)

    def _unsubscribe(self, callback) -> None:
        with self._lock:
            if callback in self._subs:
                self._subs.remove(callback)

    def publish(self, type: str, **body) -> Event:
        event = {"seq": next(self._seq), "ts": time.time(), "type": type, **body}
        with self._lock:
            self.recent.append(event)
            subs = list(self._subs)
        for callback in subs:
            try:
                callback(event)
            except Exception:  # noqa: BLE001 - a broken view never stops the runtime
                pass
        with self.changed:
            self.changed.notify_all()
        return event

    def since(self, seq: int) -> list[Event]:
        with self._lock:
            return [e for e in self.recent if e["seq"] > seq]
