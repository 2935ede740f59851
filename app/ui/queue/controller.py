"""Queue controller: reads the queue off the GUI thread every second (the runtime schedules), runs every queue
action on a worker thread, and hands the view snapshots of `Queue.entries()` (it emits, the view subscribes)."""
from __future__ import annotations

import itertools
import queue as threadsafe
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.base.errors import Explained
from app.core.base.schema import Job
from app.core.queue.inbox import detect_kind
from app.core.queue.scheduler import PRIORITIES, Queue
from app.core.runtime.machinery.bus import Kind
from app.core.train.spec import DEFAULT_MODEL, RECIPES, Hyper

TICK_MS = 1000  # the scheduler's pace: finalise ended engines, take inbox files, start what may start
POLL_MS = 50  # how often the GUI thread picks up what worker threads finished
STOP_WAIT_S = 5.0  # on close, how long a running tick may finish (it never waits on an engine)
REFUSALS = (Explained, OSError, ValueError)  # every core refusal is Explained; OSError: a full disk, a gone file
WAITING = ("queued", "held")
ENGINE = ("running", "paused")  # entry states of a job whose engine runs
RETRYABLE = ("failed", "stopped", "cancelled")

__all__ = ["QueueController", "Snapshot", "PRIORITIES", "RECIPES", "resolve_kind"]


@dataclass
class Snapshot:
    """What the view shows, read on a worker thread; `gen` orders snapshots taken by concurrent threads."""

    gen: int
    entries: list = field(default_factory=list)
    paused: bool = False
    max_concurrent: int = 1


def resolve_kind(path: str | Path, chosen: str) -> str:
    """The recipe for a dropped file: what the user chose, except that a preference file (prompt/chosen/rejected)
    left on the default sft is trained with dpo (the inbox's detection)."""
    return detect_kind(Path(path)) if chosen == "sft" else chosen


class QueueController(QObject):
    """Model side of the Queue panel. Nothing here blocks the GUI: ticks, adds, engine commands (which wait for the
    engine's ack) and cancels (which wait for the engine to end) run on threads; the GUI thread picks their results
    up from a thread-safe queue on a timer and emits only what changed.

    Why not a signal per result, and why "only what changed": with PySide6 6.12 on CPython 3.11 every `emit()` from
    Python drops a reference to True and every call of a Qt method returning void one to None (returned without
    the incref; harmless on 3.12+, where both are immortal), and the process aborts once either count reaches zero.
    A once-a-second scheduler must therefore not emit or touch widgets when nothing changed."""

    entries_changed = Signal(object)  # list[Entry], in the queue's order
    settings_changed = Signal(bool, int)  # queue paused, jobs at a time
    started = Signal(str)  # a job's engine was started by this app's scheduler
    added = Signal(str)  # a job was queued from this app
    message = Signal(str, str)  # level (info | error), text

    def __init__(self, queue: Queue, hyper: Hyper | None = None, interval_ms: int = TICK_MS) -> None:
        """A runtime (the window's own or a daemon's) ticks the scheduler; this controller's timer only re-reads the
        queue (it never calls `Queue.tick`) and the runtime's events come in through `on_runtime_event`."""
        super().__init__()
        self.queue = queue
        self.hyper = hyper  # hyper-parameters for jobs queued from the GUI (None: the recipe's defaults)
        self.entries: list = []
        self.paused = False
        self.max_concurrent = 1
        self.pending = 0  # actions not finished yet
        self.ticks = 0  # ticks finished
        self._gen = itertools.count(1)
        self._shown_gen = 0
        self._tick_thread: threading.Thread | None = None
        self._closed = False
        self._last_tick_error = ""
        self._shown: tuple | None = None  # what the view was last given (entries' signature, paused, concurrency)
        self._results: threadsafe.SimpleQueue = threadsafe.SimpleQueue()  # (handler, args) from worker threads
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.tick)
        self._poll = QTimer(self)
        self._poll.setInterval(POLL_MS)
        self._poll.timeout.connect(self._drain)
        self._poll.start()

    # --- reading ---------------------------------------------------------------------------------
    def entry(self, job_id: str):
        return next((e for e in self.entries if e.job.id == job_id), None)

    def ids(self) -> list[str]:
        return [e.job.id for e in self.entries]

    @property
    def ticking(self) -> bool:
        return self._tick_thread is not None

    def _read(self) -> Snapshot:
        """Runs on a worker thread: the queue as the view shows it."""
        gen = next(self._gen)
        return Snapshot(gen, self.queue.entries(), self.queue.paused(), self.queue.max_concurrent())

    # --- the scheduler ---------------------------------------------------------------------------
    def start(self) -> None:
        """Tick now and every interval (at app start: re-attach to what runs, go on with the queue)."""
        self._closed = False
        self.timer.start()
        self.tick()

    def stop(self, wait_s: float = STOP_WAIT_S) -> None:
        """Window closing: no more ticks (engines keep running; they outlive the GUI by design)."""
        self._closed = True
        self.timer.stop()
        self._poll.stop()
        thread = self._tick_thread
        if thread is not None:
            thread.join(timeout=wait_s)

    def tick(self) -> bool:
        """Re-read the queue on a thread (the runtime schedules); skipped (False) while the previous read still runs
        or after stop()."""
        if self._closed or self._tick_thread is not None:
            return False

        def work() -> None:
            snap, why = None, ""
            try:
                snap = self._read()
            except Exception as exc:  # noqa: BLE001 - the next tick reads again; the reason is shown once
                why = (f"The queue could not be read — {type(exc).__name__}: {exc}. It tries again every second; "
                       "if this repeats, check the data folder (disk full? permissions?).")
            self._results.put((self._on_ticked, (snap, why)))

        self._tick_thread = threading.Thread(target=work, name="queue-tick", daemon=True)
        self._tick_thread.start()
        return True

    def refresh(self) -> None:
        """Re-read the queue on a thread (no scheduling)."""
        self._run(lambda: None, "The queue could not be read")

    def on_runtime_event(self, event: dict) -> None:
        """An event of the runtime that schedules (on the GUI thread): what its tick started, refused or took from
        the inbox is announced like this controller's own ticks would."""
        kind = event.get("type")
        if kind == Kind.JOB_STARTED:
            self.started.emit(event["job"])
        elif kind == Kind.JOB_ENDED and event.get("reason"):
            self.message.emit("error", f"Job {event['job']} could not start — {event['reason']}")
        elif kind == Kind.INBOX:
            if event.get("job"):
                self.added.emit(event["job"])
                self.message.emit("info", f"Inbox: queued job {event['job']} from {event.get('name')}.")
            else:
                moved = Path(event.get("moved_to") or ".").parent
                self.message.emit("error", f"Inbox refused {event.get('name')} — {event.get('reason')} "
                                           f"(moved to {moved}).")
        else:
            return
        if not self._closed:
            self.tick()  # a fresh read now rather than at the next interval

    # --- adding ----------------------------------------------------------------------------------
    def add(self, paths: list[str | Path], kind: str = "sft", priority: str = "normal",
            model: str = DEFAULT_MODEL) -> None:
        """Queue each file on a thread (it is checked and snapshotted there); refusals come back as messages."""
        paths = [Path(p) for p in paths]
        self.pending += 1

        def work() -> None:
            done, lines, level = [], [], "info"
            for path in paths:
                try:
                    job = self.add_now(path, kind=kind, priority=priority, model=model, announce=False)
                except REFUSALS as exc:
                    level = "error"
                    lines.append(f"Not queued — {exc}")
                    continue
                except Exception as exc:  # noqa: BLE001 - a bad file must not take the app down
                    level = "error"
                    lines.append(f"Not queued — {path.name} could not be queued: {type(exc).__name__}: {exc}")
                    continue
                done.append(job.id)
                lines.append(queued_note(job, path, self.paused))
            self._finish(level, "\n".join(lines), done)

        threading.Thread(target=work, name="queue-add", daemon=True).start()

    def add_now(self, path: str | Path, kind: str = "sft", priority: str = "normal", model: str = DEFAULT_MODEL,
                hyper: Hyper | None = None, announce: bool = True) -> Job:
        """Check, snapshot and queue one file here (the caller's thread); raises the refusal. announce: emit `added`
        and tick at once (callers on the GUI thread)."""
        job = self.queue.add(path, kind=resolve_kind(path, kind), priority=priority, model=model or DEFAULT_MODEL,
                             hyper=hyper or self.hyper, source="user")
        if announce:
            self.added.emit(job.id)
            self.tick()
        return job

    # --- actions on one job, or the whole queue --------------------------------------------------
    def pause(self, job_id: str | None = None) -> None:
        """A running job's engine pauses (waits for its ack); a waiting job is held; None: the whole queue."""
        self._run(lambda: self.queue.pause(job_id), "Pause failed")

    def resume(self, job_id: str | None = None) -> None:
        self._run(lambda: self.queue.resume(job_id), "Resume failed", tick=True)

    def stop_job(self, job_id: str) -> None:
        """A running job saves a checkpoint and its adapter, then ends as stopped; a waiting one just ends."""
        self._run(lambda: self.queue.stop(job_id), "Stop failed")

    def cancel(self, job_id: str) -> None:
        """Ends the job now (a running engine is terminated); its checkpoints are kept for a retry."""
        self._run(lambda: self.queue.cancel(job_id), "Cancel failed", tick=True)

    def retry(self, job_id: str) -> None:
        self._run(lambda: self.queue.retry(job_id), "Retry failed", tick=True)

    def to_top(self, job_id: str) -> None:
        self._run(lambda: self.queue.to_top(job_id), "Not moved", tick=True)

    def move(self, job_id: str, before: str | None) -> None:
        """Before another waiting job (taking its priority), or to the end with before=None."""
        self._run(lambda: self.queue.move(job_id, before=before), "Not moved", tick=True)

    def set_priority(self, job_id: str, priority: str) -> None:
        self._run(lambda: self.queue.set_priority(job_id, priority), "Priority not changed", tick=True)

    def set_max_concurrent(self, n: int) -> None:
        def change() -> str:
            self.queue.set_max_concurrent(n)
            return f"Up to {n} job{'s' if n > 1 else ''} run at a time."
        self._run(change, "Not changed", tick=True)

    # --- threads -----------------------------------------------------------------------------------
    def _run(self, action: Callable[[], str | None], failed: str, tick: bool = False) -> None:
        """Run action on a thread; its message (or `failed — why`) and a fresh snapshot come back."""
        self.pending += 1

        def work() -> None:
            level, text = "info", None
            try:
                text = action()
                text = text[0].upper() + text[1:] if text else None
            except REFUSALS as exc:
                level, text = "error", f"{failed} — {exc}"
            except Exception as exc:  # noqa: BLE001 - shown to the user, the app goes on
                level, text = "error", f"{failed} — unexpected {type(exc).__name__}: {exc}"
            self._finish(level, text or "", [], tick)

        threading.Thread(target=work, name="queue-action", daemon=True).start()

    def _finish(self, level: str, text: str, added: list[str], tick: bool = True) -> None:
        """On the action's thread: a snapshot first, then the result (so the view is fresh when the message shows)."""
        try:
            self._results.put((self._on_snapshot, (self._read(),)))
        except Exception:  # noqa: BLE001 - the next tick reads again
            pass
        self._results.put((self._on_done, (level, text, added, tick)))

    # --- back on the GUI thread ---------------------------------------------------------------------
    def _drain(self) -> None:
        while True:
            try:
                handler, args = self._results.get_nowait()
            except threadsafe.Empty:
                return
            handler(*args)

    def _on_snapshot(self, snap: Snapshot) -> None:
        if snap.gen <= self._shown_gen:
            return  # an older read that lost the race with a newer one
        self._shown_gen = snap.gen
        self.entries = snap.entries
        settings = (snap.paused, snap.max_concurrent)
        shown = (tuple(signature(e) for e in snap.entries), settings)
        if self._shown is not None and shown == self._shown:
            return  # nothing to redraw
        if self._shown is None or settings != self._shown[1]:
            self.paused, self.max_concurrent = settings
            self.settings_changed.emit(*settings)
        self._shown = shown
        self.entries_changed.emit(self.entries)

    def _on_ticked(self, snap, why: str) -> None:
        self._tick_thread = None
        self.ticks += 1
        if why and why != self._last_tick_error:
            self.message.emit("error", why)  # once, not every second
        self._last_tick_error = why
        if snap is not None:
            self._on_snapshot(snap)

    def _on_done(self, level: str, text: str, added: list[str], tick: bool) -> None:
        self.pending -= 1
        for job_id in added:
            self.added.emit(job_id)
        if text:
            self.message.emit(level, text)
        if tick:
            self.tick()


def signature(entry) -> tuple:
    """What the view shows of an entry (times to the second): equal signatures need no redraw."""
    job = entry.job
    return (job.id, entry.place, entry.state, entry.step, entry.total, entry.phase, _sec(entry.eta_s),
            _sec(entry.starts_in_s), job.priority, job.kind, job.source, job.error, job.records)


def _sec(value: float | None) -> int | None:
    return None if value is None else int(value)


def queued_note(job: Job, path: Path, paused: bool) -> str:
    note = f" ({job.error})" if job.error else ""
    when = "the queue is paused: resume it to start it" if paused else "it starts when the queue reaches it"
    return (f"Queued job {job.id} ({job.kind}, {job.priority} priority): {job.records} records from "
            f"{path.name}{note} — {when}.")
