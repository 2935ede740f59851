"""School controller: the School tab's model side. It reads the school's state (`School.status()` + history) off the
GUI thread, follows the runtime's events (stage entered, progress, ETA, notifications) through the window's
RuntimeLink, and sends the person's commands (run now, pause, approve, policy) through the `School` facade, whose
writes the runtime — this window's or the daemon's — takes up. The words the tab and the tray show are in
school/words."""
from __future__ import annotations

import itertools
import threading
from typing import Any, Callable

from PySide6.QtCore import QTimer, Signal

from app.core.base.store import Store
from app.core.runtime.machinery.bus import NOTIFY, Kind
from app.core.runtime.school.cycles import ENDED, STAGES
from app.core.runtime.school.facade import School
from app.ui.background import PolledController
from app.ui.school.words import ended_words

REFRESH_MS = 5000  # the state is read this often (the session count and the reasons a cycle waits change slowly)
SOON_MS = 150  # events coalesce into one read
HISTORY = 30  # cycles read for the chart and the history list
REFRESH_ON = (Kind.CYCLE_STARTED, Kind.CYCLE_STAGE, Kind.CYCLE_DONE, Kind.CYCLE_REFUSED, Kind.CYCLE_FAILED, Kind.APPROVAL_WAITING,
              Kind.STAGE_FAILED, Kind.SCHOOL_WAITING, "capture", "snapshot", Kind.RUNTIME_STARTED, Kind.SERVER_PARKED,
              Kind.SERVER_RESTORED, Kind.SERVER_RESTARTED, Kind.JOB_ENDED)


class SchoolController(PolledController):
    """`changed` after every read (and when a stage event arrives), `progress` for the running stage's progress,
    `notice` for the events a person is told about (only news: replayed history is not notified again)."""

    READS, THREAD = "The school's state", "school-read"
    changed = Signal()
    progress = Signal(object)  # the latest `cycle.progress` event of the current cycle
    notice = Signal(object)  # a NOTIFY event

    def __init__(self, store: Store, link=None, refresh_ms: int = REFRESH_MS) -> None:
        super().__init__(refresh_ms)
        self.school = School(store)
        self.link = link
        self.status: dict[str, Any] | None = None
        self.history: list[dict[str, Any]] = []
        self.live: dict[str, Any] = {}  # {"cycle", "stage"} from the last cycle.stage event
        self.last_progress: dict[str, Any] | None = None
        self.announced: int | None = None  # the cycle the banner said starts (or runs): its end replaces those words
        self._tickets = itertools.count()
        self._serving = 0  # the ticket whose command may run now
        self._turn = threading.Condition()
        self._soon = QTimer(self)
        self._soon.setSingleShot(True)
        self._soon.setInterval(SOON_MS)
        self._soon.timeout.connect(self.refresh)
        self.team = None  # team/controller.TeamReader once follow_team: the team school this data dir is a member of
        if link is not None:
            link.event.connect(self.on_event)

    def follow_team(self, team) -> None:
        """Read the team school through `team` (a TeamReader): its reads re-show the tab (and the tray)."""
        self.team = team
        team.changed.connect(self.changed)

    @property
    def team_member(self) -> bool:
        return self.team is not None and self.team.member

    # --- lifecycle -------------------------------------------------------------------------------------
    def stop(self) -> None:
        super().stop()
        self._soon.stop()

    # --- reading ---------------------------------------------------------------------------------------
    def _reader(self):
        return lambda: (self.school.status(), self.school.history(HISTORY))

    def refresh_soon(self) -> None:
        if not self._soon.isActive():
            self._soon.start()

    def _apply(self, result) -> None:
        self.status, self.history = result
        ended = next((c for c in self.history if c["id"] == self.announced and c["state"] in ENDED), None)
        if ended is not None:
            self.announced = None
            self.message.emit(*ended_words(ended))
        cycle = self.status.get("cycle")
        if cycle is None or cycle["id"] != self.live.get("cycle"):
            self.live = {}
        elif self.live.get("stage") and STAGES.index(self.live["stage"]) > STAGES.index(cycle["stage"]):
            cycle["stage"] = self.live["stage"]  # the read began before the event: the event is newer

    # --- the runtime's events ----------------------------------------------------------------------------
    def on_event(self, event: dict) -> None:
        kind = event.get("type")
        if kind == Kind.CYCLE_STAGE:
            self.live = {"cycle": event.get("cycle"), "stage": event.get("stage")}
            self.last_progress = None
            self._show_stage(event.get("cycle"), event.get("stage"))
        elif kind == Kind.CYCLE_PROGRESS:
            if self.live.get("cycle") != event.get("cycle") or self.live.get("stage") != event.get("stage"):
                self.live = {"cycle": event.get("cycle"), "stage": event.get("stage")}
                self._show_stage(event.get("cycle"), event.get("stage"))
            self.last_progress = event
            self.progress.emit(event)
        if kind in NOTIFY and (self.link is None or self.link.is_news(event)):
            self.notice.emit(event)
        if kind in REFRESH_ON:
            self.refresh_soon()

    def _show_stage(self, cycle_id, stage: str | None) -> None:
        """A stage event shows at once (the read that follows confirms it)."""
        if self.status is None or stage not in STAGES:
            return
        cycle = self.status.get("cycle")
        if cycle is None or cycle.get("id") != cycle_id:
            cycle = {"id": cycle_id, "stage": stage, "state": "running", "trigger": "", "inputs": {}, "times": {},
                     "outputs": {}, "reason": ""}
            self.status = {**self.status, "cycle": cycle}
        cycle["stage"] = stage
        self.changed.emit()

    # --- commands ----------------------------------------------------------------------------------------
    def run_now(self) -> None:
        def done(result: dict) -> None:
            self.announced = result["cycle"]
            if result["created"]:
                text = f"Cycle {result['cycle']} starts now."
            else:
                text = f"Cycle {result['cycle']} is already running ({result['stage']})."
            self._said(text + (f" {result['note'][0].upper()}{result['note'][1:]}." if result.get("note") else ""))
        self._command("school-now", lambda: self.school.now("window"), done, "Not started")

    def toggle_pause(self) -> None:
        if self.paused:
            self._command("school-resume", self.school.resume, lambda _r: self._said("Learning resumed."),
                          "Not resumed")
        else:
            self._command("school-pause", self.school.pause,
                          lambda _r: self._said("Learning paused: no new cycle starts, a running one waits "
                                                "before its next step."), "Not paused")

    def decide(self, approve: bool) -> None:
        cycle_id = self.awaiting_approval()
        if cycle_id is None:
            self.message.emit("error", "No deployment waits for approval.")
            return
        words = "approved: it is deployed next" if approve else "refused: the deployed model stays"
        self._command("school-decide", lambda: self.school.decide(cycle_id, approve),
                      lambda _r: self._said(f"Cycle {cycle_id}'s deployment {words}."),
                      "Not approved" if approve else "Not refused")

    def set_policy(self, key: str, value: Any) -> None:
        current = (self.status or {}).get("policy", {}).get(key)
        if current == value:
            return
        self._command("school-policy", lambda: self.school.set_policy(key, value),
                      lambda _r: self._said(f"Policy {key} is now {value}."), "Not changed")

    def _command(self, name: str, call: Callable, done: Callable, failed: str) -> None:
        """One command at a time (a policy change reads, changes and writes the whole policy: two at once could lose
        one), in the order given, and their outcomes come back in that order too (each is posted before the next
        command runs, so the banner ends on the last one's words)."""
        self._set_busy(True)
        ticket = next(self._tickets)
        handlers = self._handlers(done, failed)

        def in_turn() -> None:
            with self._turn:
                self._turn.wait_for(lambda: self._serving == ticket)
            try:
                self._run_and_post(call, *handlers)
            finally:
                with self._turn:
                    self._serving += 1
                    self._turn.notify_all()
        threading.Thread(target=in_turn, name=name, daemon=True).start()

    def _said(self, text: str) -> None:
        self.message.emit("info", text)
        self._wake()
        self.refresh()

    def _failed(self, text: str) -> None:
        self.message.emit("error", text)
        self.refresh()  # the editors go back to the stored values

    def _wake(self) -> None:
        runtime = getattr(self.link, "runtime", None)
        if runtime is not None:
            runtime.wake()  # this window's runtime looks at the cycle now (a daemon looks within seconds)

    # --- reading the state (the panel and the tray) ---------------------------------------------------------
    @property
    def paused(self) -> bool:
        return bool((self.status or {}).get("paused"))

    def awaiting_approval(self) -> int | None:
        cycle = (self.status or {}).get("cycle")
        if cycle and cycle.get("state") == "approval" and (cycle.get("inputs") or {}).get("approval") is None:
            return cycle["id"]
        return None


# --- words (pure functions of the state) -------------------------------------------------------------------
