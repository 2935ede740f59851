"""Team controller: the Team page's model side, and the team school's reader the School tab and the tray share. It
reads on a worker thread whether this data dir is a member, its outbox and the team server's GET /v1/status
(`member.team_status`); an unreachable server is a state ("offline since …"), not an error. `TeamController` adds
the person's commands — join, push now, withdraw — each on a worker thread. The words are app/ui/team/words.py."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import Signal

from app.core.base import settings
from app.core.base.store import Store
from app.core.team import member, wire
from app.ui.background import PolledController
from app.ui.team.words import pushed_words, withdrawn_words

REFRESH_MS = 15_000  # the window's Team page and School line read the team server this often
TRAY_POLL_KEY = "team.tray_poll_s"  # settings key: how often the tray asks the team server (seconds)
TRAY_POLL_S = 120


@dataclass
class TeamView:
    """One read: member or not; the server URL; its status (None when it could not be read, `problem` says why:
    unreachable, or `refused`: the server refused the token, or none is kept); the outbox (files, the sessions in
    them)."""

    member: bool = False
    url: str = ""
    status: dict | None = None
    problem: str = ""
    refused: bool = False
    files: int = 0
    sessions: int = 0


_COUNTED: dict[tuple[str, int, int], int] = {}  # (outbox file, size, mtime_ns) -> its sessions: each file decoded once


def outbox_count() -> tuple[int, int]:
    """(outbox files, sessions in them)."""
    files, sessions = member.pending(), 0
    for path in files:
        try:
            stat = path.stat()
            key = (str(path), stat.st_size, stat.st_mtime_ns)
            if key not in _COUNTED:
                _COUNTED[key] = len(wire.decode(path.read_bytes()))
            sessions += _COUNTED[key]
        except (OSError, EOFError, ValueError):
            pass  # sent and deleted meanwhile, or a torn file the next push reports
    return len(files), sessions


def read_team(status: Callable[[], dict] = member.team_status) -> TeamView:
    """What the Team page shows (on a worker thread: it reads files and asks the network)."""
    if not member.is_member():
        return TeamView()
    files, sessions = outbox_count()
    view = TeamView(member=True, files=files, sessions=sessions)
    try:
        view.url, _token = member.joined()
    except member.TeamError as exc:  # joined, but no token is kept: this side's problem, not an outage
        view.problem, view.refused = str(exc), True
        return view
    try:
        view.status = status()
    except member.Refused as exc:
        view.problem, view.refused = str(exc), True
    except member.TeamError as exc:
        view.problem = str(exc)
    return view


def tray_poll_ms(store: Store) -> int:
    try:
        return max(5, int(settings.get(store, TRAY_POLL_KEY, TRAY_POLL_S))) * 1000
    except (TypeError, ValueError):
        return TRAY_POLL_S * 1000


class TeamReader(PolledController):
    """`changed` after every read; `view` the last one; `offline_since` when the server stopped answering (None while
    it answers). read: what one read does (tests pass a stand-in for the team server's answer)."""

    READS, THREAD = "The team's state", "team-read"
    changed = Signal()

    def __init__(self, refresh_ms: int = REFRESH_MS, read: Callable[[], TeamView] = read_team) -> None:
        super().__init__(refresh_ms)
        self.view = TeamView()
        self.offline_since: float | None = None
        self.last_status: dict | None = None  # the last status the server gave (shown, dated, while it is offline)
        self.last_read_at: float | None = None
        self._read = read

    @property
    def member(self) -> bool:
        return self.view.member

    @property
    def offline(self) -> bool:
        return self.view.member and self.view.status is None

    def _reader(self):
        return self._read

    def _apply(self, result: TeamView) -> None:
        self.view = result
        if result.status is not None:
            self.last_status, self.last_read_at = result.status, time.time()
        elif not result.member:
            self.last_status = self.last_read_at = None
        if result.member and result.status is None and not result.refused:
            self.offline_since = self.offline_since or time.time()
        else:
            self.offline_since = None


class TeamController(TeamReader):
    """The Team page's controller: join, push now, withdraw. `last_push`: (outcome, words, when) of the last push —
    outcome sent | partly | offline | refused | failed."""

    def __init__(self, store: Store, refresh_ms: int = REFRESH_MS, read: Callable[[], TeamView] = read_team) -> None:
        super().__init__(refresh_ms, read)
        self.store = store
        self.last_push: tuple[str, str, float] | None = None

    def join(self, url: str, token: str) -> None:
        self._set_busy(True)
        self._background("team-join", lambda: member.join(url, token), self._joined, "Not joined")

    def _joined(self, _where: str) -> None:
        self.message.emit("info", "Joined the team: Push now sends your captured sessions (scrubbed) to its server.")
        self.refresh()

    def push(self) -> None:
        self._set_busy(True)
        self._on_thread("team-push", lambda: member.push(self.store), lambda done: self._finish(self._pushed, done),
                        lambda exc: self._finish(self._push_refused, exc))

    def _pushed(self, done: member.Pushed) -> None:
        outcome, words = pushed_words(done.sent_sessions, done.sent_files, done.left_files, done.offline,
                                      done.problems)
        self.last_push = (outcome, words, time.time())
        self.message.emit("error" if outcome == "partly" else "info", f"Push: {words}.")
        self.changed.emit()  # the outcome shows now; the read that follows shows the outbox
        self.refresh()

    def _push_refused(self, exc: Exception) -> None:
        outcome = "refused" if isinstance(exc, member.Refused) else "failed"
        why = str(exc) if isinstance(exc, member.TeamError) else f"unexpected {type(exc).__name__}: {exc}"
        self.last_push = (outcome, why, time.time())
        self.message.emit("error", f"Not pushed — {why}")
        self.changed.emit()
        self.refresh()

    def withdraw(self) -> None:
        self._set_busy(True)
        self._background("team-withdraw", member.withdraw, self._withdrawn, "Not withdrawn")

    def _withdrawn(self, result: tuple[int, list[str]]) -> None:
        self.message.emit("info", withdrawn_words(*result))
        self.refresh()
