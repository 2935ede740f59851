"""A team member's runtime ships by itself: once at start and whenever capture stored sessions, spool what is new and
drain the outbox, on a thread of its own (capture only nudges it); while the server cannot be reached, try again every
`team.retry_s` seconds (a setting, default 60). Each outcome is a `team.pushed` event; a refused token (or none kept)
is one `team.refused` notification (what, why, fix) and no more tries until the data dir joins again."""
from __future__ import annotations

import logging
import threading

from app.core.base import settings
from app.core.base.errors import Explained
from app.core.base.store import Store
from app.core.runtime.machinery.bus import Bus, Kind
from app.core.team import member

log = logging.getLogger("nightschool.runtime.shipping")
RETRY_KEY = "team.retry_s"
RETRY_S = 60.0


def retry_s(store: Store) -> float:
    """Seconds between tries while the team's server cannot be reached (the `team.retry_s` setting)."""
    try:
        return max(0.1, float(settings.get(store, RETRY_KEY, RETRY_S)))
    except (TypeError, ValueError):
        return RETRY_S


def set_retry_s(store: Store, seconds: float) -> float:
    if not seconds > 0:
        raise settings.SettingError(f"{seconds} is not a retry interval", fix="give a number of seconds above 0")
    settings.put(store, RETRY_KEY, float(seconds))
    return float(seconds)


class Shipper:
    """run() is the loop (the runtime's thread); nudge() asks for a push soon (capture stored sessions)."""

    def __init__(self, store: Store, bus: Bus, stopping: threading.Event, every_s: float | None = None) -> None:
        self.store, self.bus, self.stopping, self.every_s = store, bus, stopping, every_s
        self.due = threading.Event()
        self.retrying = False  # the last try left files behind (offline, or a file the server refused)
        self.refused_join: object = None  # the join the server refused: no tries until it changes
        self.seen_join: object = None

    def nudge(self) -> None:
        self.due.set()

    def run(self) -> None:
        self.due.set()  # at start: sessions captured while no runtime ran, an outbox left by the last one
        while not self.stopping.is_set():
            self.due.wait(self.every_s or retry_s(self.store))
            if self.stopping.is_set():
                return
            nudged = self.due.is_set()
            self.due.clear()
            joined = _join_mark()
            if joined != self.seen_join:  # joined (again) since the last look: ship what is stored
                self.seen_join, nudged = joined, True
            if joined is None or joined == self.refused_join or not (nudged or self.retrying):
                continue
            self.ship_once(joined)

    def ship_once(self, joined: object) -> member.Pushed | None:
        """One spool + drain; its outcome on the bus."""
        try:
            done = member.push(self.store)
        except Explained as exc:  # Refused (401) or no token kept: the member must join again
            self.refused_join, self.retrying = joined, False
            log.warning("team: %s", exc)
            self.bus.publish(Kind.TEAM_REFUSED, what=exc.message, why=exc.why, fix=exc.fix, reason=str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - e.g. the outbox cannot be written: said, tried again on the timer
            self.retrying = True
            self.bus.publish(Kind.RUNTIME_ERROR, loop="team", message=f"{type(exc).__name__}: {exc}")
            return None
        self.retrying = done.left_files > 0
        if done.spooled or done.sent_files or done.left_files or done.problems:
            self.bus.publish(Kind.TEAM_PUSHED, **done.as_dict())
        return done


def _join_mark() -> object:
    """What identifies this data dir's join (None: not a member): `team join` rewrites the server file."""
    if not member.is_member():
        return None
    try:
        found = (member.team_dir() / "server.json").stat()
    except OSError:
        return None
    return (found.st_ino, found.st_mtime_ns, found.st_size)
