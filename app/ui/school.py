"""School controller: the School tab's model side. It reads the school's state (`School.status()` + history) off the
GUI thread, follows the runtime's events (stage entered, progress, ETA, notifications) through the window's
RuntimeLink, and sends the person's commands (run now, pause, approve, policy) through the `School` facade, whose
writes the runtime — this window's or the daemon's — takes up. Also the words the tab and the tray show (pure
functions of the state, tested without Qt)."""
from __future__ import annotations

import itertools
import threading
from datetime import datetime, timezone
from typing import Any, Callable

from PySide6.QtCore import QTimer, Signal

from app.core.base.store import Store
from app.core.runtime.bus import NOTIFY
from app.core.runtime.cycles import STAGES
from app.core.runtime.school import School
from app.ui.background import BackgroundController

REFRESH_MS = 5000  # the state is read this often (the session count and the reasons a cycle waits change slowly)
SOON_MS = 150  # events coalesce into one read
HISTORY = 30  # cycles read for the chart and the history list
REFRESH_ON = ("cycle.started", "cycle.stage", "cycle.done", "cycle.refused", "cycle.failed", "approval.waiting",
              "stage.failed", "school.waiting", "capture", "snapshot", "runtime.started", "server.parked",
              "server.restored", "server.restarted", "job.ended")
CHART = ("agreement", "validity", "loss")
TRAINING_STAGES = ("building", "training", "refining")


class SchoolController(BackgroundController):
    """`changed` after every read (and when a stage event arrives), `progress` for the running stage's progress,
    `notice` for the events a person is told about (only news: replayed history is not notified again)."""

    changed = Signal()
    progress = Signal(object)  # the latest `cycle.progress` event of the current cycle
    notice = Signal(object)  # a NOTIFY event

    def __init__(self, store: Store, link=None, refresh_ms: int = REFRESH_MS) -> None:
        super().__init__()
        self.school = School(store)
        self.link = link
        self.status: dict[str, Any] | None = None
        self.history: list[dict[str, Any]] = []
        self.live: dict[str, Any] = {}  # {"cycle", "stage"} from the last cycle.stage event
        self.last_progress: dict[str, Any] | None = None
        self.reads = 0
        self.read_error = ""
        self._reading = False
        self._again = False
        self._tickets = itertools.count()
        self._serving = 0  # the ticket whose command may run now
        self._turn = threading.Condition()
        self._timer = QTimer(self)
        self._timer.setInterval(refresh_ms)
        self._timer.timeout.connect(self.refresh)
        self._soon = QTimer(self)
        self._soon.setSingleShot(True)
        self._soon.setInterval(SOON_MS)
        self._soon.timeout.connect(self.refresh)
        if link is not None:
            link.event.connect(self.on_event)

    # --- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> None:
        self._timer.start()
        self.refresh()

    def stop(self) -> None:
        self._closed = True
        self._timer.stop()
        self._soon.stop()

    # --- reading ---------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read the state on a thread (one read at a time; a request meanwhile reads again after it)."""
        if self._closed:
            return
        if self._reading:
            self._again = True
            return
        self._reading = True

        def body() -> None:
            try:
                result: Any = (self.school.status(), self.school.history(HISTORY))
            except Exception as exc:  # noqa: BLE001 - said once in the banner; the next read tries again
                result = exc
            self._post(self._on_read, (result,))

        threading.Thread(target=body, name="school-read", daemon=True).start()

    def refresh_soon(self) -> None:
        if not self._soon.isActive():
            self._soon.start()

    def _on_read(self, result) -> None:
        self._reading = False
        if isinstance(result, Exception):
            why = f"The school's state could not be read — {type(result).__name__}: {result}"
            if why != self.read_error:
                self.message.emit("error", why)
            self.read_error = why
        else:
            self.read_error = ""
            self.status, self.history = result
            cycle = self.status.get("cycle")
            if cycle is None or cycle["id"] != self.live.get("cycle"):
                self.live = {}
            elif self.live.get("stage") and STAGES.index(self.live["stage"]) > STAGES.index(cycle["stage"]):
                cycle["stage"] = self.live["stage"]  # the read began before the event: the event is newer
            self.reads += 1
            self.changed.emit()
        if self._again:
            self._again = False
            self.refresh()

    # --- the runtime's events ----------------------------------------------------------------------------
    def on_event(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "cycle.stage":
            self.live = {"cycle": event.get("cycle"), "stage": event.get("stage")}
            self.last_progress = None
            self._show_stage(event.get("cycle"), event.get("stage"))
        elif kind == "cycle.progress":
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
        one), in the order given."""
        self._set_busy(True)
        ticket = next(self._tickets)

        def in_turn():
            with self._turn:
                self._turn.wait_for(lambda: self._serving == ticket)
            try:
                return call()
            finally:
                with self._turn:
                    self._serving += 1
                    self._turn.notify_all()
        self._background(name, in_turn, done, failed)

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
def fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def signed(value: float | None) -> str:
    return "" if value is None else f"{value:+.3f}".replace("-", "−")


def eta_words(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return ""
    seconds = int(seconds)
    if seconds < 60:
        return f"about {seconds} s left"
    if seconds < 3600:
        return f"about {seconds // 60} min left"
    return f"about {seconds // 3600} h {seconds % 3600 // 60:02d} min left"


def local_hhmm(stamp: str | None, fmt: str = "%a %H:%M") -> str:
    """An ISO time in local time (a time without zone is UTC: what the store gives back)."""
    if not stamp:
        return ""
    try:
        at = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).astimezone().strftime(fmt)


def deployed_card(history: list[dict]) -> dict | None:
    """The newest report card of a cycle that deployed its model (the student's scores come from it)."""
    return next((c["report"] for c in history if c.get("report", {}).get("deployed")), None)


def last_card(status: dict | None, history: list[dict]) -> tuple[dict | None, dict]:
    """(the newest ended cycle, its report card)."""
    last = (status or {}).get("last") or next((c for c in history if c.get("state") in ("done", "refused", "failed")),
                                              None)
    return last, (last or {}).get("report") or {}


def student_lines(status: dict | None, history: list[dict]) -> list[str]:
    if status is None:
        return ["Reading the school…"]
    student = status.get("student") or {}
    lines = [f"Base model: {student.get('base_model') or 'default'}"]
    if student.get("deployed_checkpoint"):
        lines.append(f"Deployed: checkpoint #{student['deployed_checkpoint']} ({student.get('deployed_label')})")
    else:
        lines.append("Deployed: nothing yet — the base model is the student")
    deployed = student.get("deployed_checkpoint")
    card = next((c["report"] for c in history if deployed and (c.get("report") or {}).get("checkpoint") == deployed),
                None) or (deployed_card(history) if deployed else None)
    label = "Scores"
    if card is None:
        _, card = last_card(status, history)
        label = "Last candidate (not deployed)"
    if card and card.get("metrics"):
        scores = []
        for key in CHART:
            m = card["metrics"].get(key) or {}
            if m.get("candidate") is not None:
                delta = signed(m.get("vs_base"))
                scores.append(f"{key} {fmt(m['candidate'])}" + (f" ({delta} vs base)" if delta else ""))
        if scores:
            lines.append(f"{label}: " + ", ".join(scores))
    served = student.get("served")
    if served:
        lines.append(f"Served: {served.get('model') or 'a model'} at {served.get('url')}"
                     + (" (parked while training)" if served.get("parked") else ""))
    else:
        lines.append("Served: not running")
    return lines


def next_state(status: dict | None) -> tuple[int, int, list[str]]:
    """(sessions, needed, lines) for the "next cycle" box."""
    if status is None:
        return 0, 0, []
    nxt = status.get("next") or {}
    new, needed = int(nxt.get("new_sessions") or 0), int(nxt.get("needed") or 0)
    window = nxt.get("window") or "any"
    lines = [f"Window: {'any time' if window == 'any' else window}"
             + (f" — opens {local_hhmm(nxt['next_window'])}" if nxt.get("next_window") else "")]
    cycle = status.get("cycle")
    if status.get("paused"):
        lines.append("Learning is paused: resume it to go on.")
    if cycle is not None:
        doing = "waits for your approval" if cycle.get("state") == "approval" else "is running"
        lines.append(f"Cycle {cycle['id']} {doing}: the next one is counted after it ends.")
    elif nxt.get("waiting"):
        if new < needed:
            lines.append(f"Waits for {needed - new} more session{'s' * (needed - new != 1)}.")
        # the session count and the window are said above; the other reasons (busy, battery, cool-down) here
        lines += ["Waits: " + reason for reason in nxt["waiting"]
                  if not any(said in reason for said in ("paused", "new usable sessions", "training window"))]
    else:
        lines.append("Ready: a cycle starts at the runtime's next look.")
    return new, needed, lines


def empty_text(status: dict | None) -> str:
    new, needed, _ = next_state(status)
    return f"No cycle yet — {new} of {needed} sessions captured" if status is not None else "Reading the school…"


def cycle_headline(status: dict | None, history: list[dict]) -> str:
    if status is None:
        return "Reading the school…"
    cycle = status.get("cycle")
    if cycle is None:
        if not history:
            return empty_text(status)
        last = history[0]
        return f"No cycle running — cycle {last['id']} {last['state']}" + (
            f": {last['reason']}" if last.get("reason") and last["state"] != "done" else "")
    if cycle.get("state") == "approval":
        return f"Cycle {cycle['id']} waits for your approval to deploy"
    return f"Cycle {cycle['id']} — {cycle['stage']}" + (f"  ·  trigger: {cycle['trigger']}"
                                                       if cycle.get("trigger") else "")


def stage_marks(status: dict | None, history: list[dict]) -> tuple[str | None, list[str], str]:
    """(current stage, stages done, how the current one shows: running | approval | failed | refused | done)."""
    cycle = (status or {}).get("cycle")
    if cycle is None:
        last = history[0] if history else None
        if last is None:
            return None, [], "running"
        done = [s for s in STAGES if s in (last.get("times") or {}) and s != last.get("stage")]
        if last.get("state") == "done":
            return None, [s for s in STAGES if s in (last.get("times") or {})] or list(STAGES), "done"
        return last.get("stage"), done, "refused" if last.get("state") == "refused" else "failed"
    stage = cycle.get("stage")
    done = [s for s in STAGES[:STAGES.index(stage)]] if stage in STAGES else []
    return stage, done, "approval" if cycle.get("state") == "approval" else "running"


def progress_words(event: dict | None) -> tuple[int, int, str]:
    """(step, total, words) of a cycle.progress event."""
    if not event:
        return 0, 0, ""
    step, total = int(event.get("step") or 0), int(event.get("total") or 0)
    words = [str(event.get("phase") or event.get("stage") or "")]
    if total:
        words.append(f"{step}/{total}")
    eta = eta_words(event.get("eta_s"))
    if eta:
        words.append(eta)
    return step, total, " · ".join(w for w in words if w)


def chart_points(history: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """metric -> [(cycle id, the candidate's held-out value)] over the cycles that were judged, oldest first."""
    out: dict[str, list[tuple[float, float]]] = {key: [] for key in CHART}
    for cycle in sorted(history, key=lambda c: c["id"]):
        metrics = (cycle.get("report") or {}).get("metrics") or {}
        for key in CHART:
            value = (metrics.get(key) or {}).get("candidate")
            if value is not None:
                out[key].append((float(cycle["id"]), float(value)))
    return out


def base_points(history: list[dict]) -> dict[str, float]:
    """The base model's value of each chart metric (from the newest card that has it): the dashed reference."""
    for cycle in history:
        metrics = (cycle.get("report") or {}).get("metrics") or {}
        found = {key: (metrics.get(key) or {}).get("base") for key in CHART}
        if any(v is not None for v in found.values()):
            return {k: v for k, v in found.items() if v is not None}
    return {}


def notice_text(event: dict) -> tuple[str, str, str]:
    """(title, text, level) of a NOTIFY event, as the tray or the banner says it."""
    kind, cycle = event.get("type"), event.get("cycle")
    reason = event.get("reason") or ""
    if kind == "cycle.done":
        return f"Cycle {cycle} finished", event.get("summary") or f"cycle {cycle} finished", "info"
    if kind == "cycle.refused":
        return f"Cycle {cycle}: the gate refused the model", reason or event.get("summary") or "", "error"
    if kind == "cycle.failed":
        where = f" at {event['stage']}" if event.get("stage") else ""
        return f"Cycle {cycle} failed{where}", reason, "error"
    if kind == "stage.failed":
        return f"Cycle {cycle}: {event.get('stage')} failed", reason, "error"
    if kind == "approval.waiting":
        reasons = "; ".join(event.get("reasons") or [])
        checkpoint = f"checkpoint #{event['checkpoint']}" if event.get("checkpoint") else "the new model"
        return (f"Cycle {cycle}: deployment waits for your approval",
                f"{checkpoint} passed the gate" + (f" ({reasons})" if reasons else "")
                + ". Approve or refuse it on the School tab.", "info")
    if kind == "alert.fatal":
        return f"Training stopped: {event.get('kind')}", f"job {event.get('job')}: {event.get('message')}", "error"
    return kind or "event", reason, "info"


def tray_state(status: dict | None, failed: bool = False) -> str:
    """idle | capturing | training | judging | error, from the state (capturing is a moment: the tray sets it)."""
    if failed:
        return "error"
    cycle = (status or {}).get("cycle")
    if cycle is None:
        return "idle"
    return "training" if cycle.get("stage") in TRAINING_STAGES else "judging"


def runtime_words(status: dict | None) -> str:
    runtime = (status or {}).get("runtime")
    if not runtime:
        return "No runtime runs: nothing schedules."
    return f"Runs in the {runtime.get('role')} (pid {runtime.get('pid')})"
