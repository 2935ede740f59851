"""The runtime's event bus: loops publish events (dicts with a type), views subscribe; the recent ones are kept."""
from __future__ import annotations

import collections
import itertools
import threading
import time
from enum import StrEnum
from typing import Callable

Event = dict


class Kind(StrEnum):
    """Every event type the runtime publishes (and the two a viewer's link adds), declared once; an event's "type"."""
    RUNTIME_STARTED = "runtime.started"
    RUNTIME_STOPPED = "runtime.stopped"
    RUNTIME_ERROR = "runtime.error"  # a loop raised: loop, message
    CAPTURE = "capture"  # a file was ingested: path, agent, sessions, ...
    INBOX = "inbox"  # a file dropped in the inbox was queued or refused
    JOB_STARTED = "job.started"
    JOB_ENDED = "job.ended"  # state, and the reason when it failed to start
    ALERT_FATAL = "alert.fatal"  # a running job's checker stopped it
    SERVER_PARKED = "server.parked"  # the served model left memory for a training
    SERVER_RESTORED = "server.restored"
    SERVER_RESTARTED = "server.restarted"  # the keeper started a server that was left on
    SERVER_ERROR = "server.error"
    SCHOOL_WAITING = "school.waiting"  # why no cycle runs now: reason
    CYCLE_STARTED = "cycle.started"
    CYCLE_STAGE = "cycle.stage"  # a cycle entered a stage (resumed: after a restart)
    CYCLE_PROGRESS = "cycle.progress"  # a stage's phase, step and total
    APPROVAL_WAITING = "approval.waiting"  # policy "ask": a candidate waits for a person
    CYCLE_DONE = "cycle.done"
    CYCLE_REFUSED = "cycle.refused"
    CYCLE_FAILED = "cycle.failed"
    STAGE_FAILED = "stage.failed"
    TEAM_PUSHED = "team.pushed"  # a member's runtime spooled and drained its outbox: Pushed's counts, offline
    TEAM_REFUSED = "team.refused"  # the team's server refused this member (or no token is kept): what, why, fix
    SNAPSHOT = "snapshot"  # the status channel's first frame to a viewer (machinery/channel.py)
    CHANNEL_REFUSED = "error"  # the status channel's only frame to a viewer with a wrong token
    VIEWER_CONNECTION = "viewer.connection"  # a viewer's link to the runtime came or went (app/ui/runtime_link.py)


# Events a person is told about (the tray notifies, the window shows a banner).
NOTIFY = frozenset({Kind.CYCLE_DONE, Kind.CYCLE_REFUSED, Kind.CYCLE_FAILED, Kind.APPROVAL_WAITING, Kind.ALERT_FATAL,
                    Kind.STAGE_FAILED, Kind.TEAM_REFUSED})
# The ends of a cycle, by the state its row ends in.
CYCLE_ENDS = {"done": Kind.CYCLE_DONE, "refused": Kind.CYCLE_REFUSED, "failed": Kind.CYCLE_FAILED}


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

    def publish(self, type: Kind, **body) -> Event:
        """Publish one event; a type not declared in Kind is a programming error (ValueError)."""
        event = {"seq": next(self._seq), "ts": time.time(), "type": Kind(type).value, **body}
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
