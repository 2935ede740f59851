"""The window's link to the runtime that schedules for its data dir: its own (started in this process when no other
process holds the lock) or a daemon's (the window is a viewer of its status channel). Either way every bus event
reaches the GUI thread as `event(dict)`. Also the hand-over to a daemon when the window closes."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QEventLoop, QObject, Qt, QTimer, Signal, Slot

from app.core.base import paths
from app.core.runtime.machinery import channel, lock
from app.core.runtime.machinery.bus import Kind

RETRY_S = 2.0  # a viewer whose daemon went looks for a runtime this often
HANDOVER_S = 30.0  # how long closing the window waits for the daemon to hold the lock
POLL_MS = 100
SEEN = 2000  # bus sequence numbers remembered to drop an event delivered twice (replay + live)


def app_command(*args: str) -> list[str]:
    """`nightschool ARGS` from this interpreter (the packaged app's binary is the `nightschool` command itself)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, *args]
    return [sys.executable, "-m", "app.cli.main", *args]


def daemon_command() -> list[str]:
    return app_command("daemon")


class RuntimeLink(QObject):
    """mode: "own" (this process runs the runtime), "viewer" (another process does) or "none" (not linked yet).
    `attached_at`: events from before it are history (replayed), not news."""

    event = Signal(object)  # a bus event dict (or the channel's "snapshot" frame), on the GUI thread
    connection = Signal(bool, str)  # viewer: connected to the daemon's channel?, in words
    _arrived = Signal(object)  # from the bus's or the channel's thread

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.mode = "none"
        self.runtime = None
        self.holder: dict | None = None
        self.connected = False
        self.attached_at = time.time()
        self._seen: set[int] = set()
        self._last: tuple[int | None, int] = (None, 0)  # (daemon pid, last event seq) a viewer received
        self._unsubscribe: Callable[[], None] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        # queued even from the GUI thread: what own() replays arrives after build_window has connected the views
        self._arrived.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    # --- the two ways in -----------------------------------------------------------------------------
    def own(self, runtime) -> None:
        """Follow this process's runtime (started): its events so far, then every new one."""
        self.mode, self.runtime, self.holder = "own", runtime, dict(runtime.lock.info)
        self._unsubscribe = runtime.bus.subscribe(self._post)
        for event in runtime.bus.since(0):  # what it said while starting (e.g. the first capture sweep)
            self._post(event)

    def view(self, holder: dict | None) -> None:
        """Watch the runtime another process runs (its status channel, on a thread); when it goes, wait for the
        next one."""
        self.mode, self.holder = "viewer", holder
        self._thread = threading.Thread(target=self._watch_loop, name="runtime-viewer", daemon=True)
        self._thread.start()

    @property
    def pid(self) -> int | None:
        return (self.holder or {}).get("pid")

    @property
    def role(self) -> str:
        return (self.holder or {}).get("role") or ""

    def describe(self) -> str:
        """Where the school runs, in words (the School tab's footer)."""
        if self.mode == "own":
            return "Learning runs in this window. Closing it asks whether to keep learning in the background."
        if self.mode == "viewer" and self.connected:
            return (f"Learning runs in the {self.role or 'background'} (pid {self.pid}); this window shows it and "
                    "can close without stopping it.")
        if self.mode == "viewer":
            return "Waiting for the background school (nothing schedules until it runs again)…"
        return "Not linked to a runtime."

    def stop(self) -> None:
        self._closed = True
        self._stop.set()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    # --- threads ------------------------------------------------------------------------------------
    def _watch_loop(self) -> None:
        holder = self.holder
        while not self._stop.is_set():
            if holder is None or not holder.get("channel"):
                self._stop.wait(RETRY_S)
                holder = lock.holder()
                continue
            why = "the background school stopped"
            pid = holder.get("pid")
            since = self._last[1] if self._last[0] == pid else 0  # the same daemon again: only what was missed
            try:
                for frame in channel.watch(holder["channel"], holder.get("token", ""), since=since):
                    if self._stop.is_set():
                        return
                    if frame.get("type") == Kind.CHANNEL_REFUSED:
                        why = f"the background school refused this window: {frame.get('message')}"
                        break
                    if frame.get("type") == Kind.SNAPSHOT:
                        self.holder = holder
                        self._post_connection(True, f"attached to the {holder.get('role')} (pid {holder['pid']})")
                    if frame.get("seq"):
                        self._last = (pid, frame["seq"])
                    self._post(frame)
            except OSError as exc:
                why = f"the background school cannot be reached ({exc})"
            if self._stop.is_set():
                return
            self._post_connection(False, why)
            self._stop.wait(RETRY_S)
            holder = lock.holder()

    def _post(self, event: dict) -> None:
        if self._closed:
            return
        try:
            self._arrived.emit(event)
        except RuntimeError:  # the window is gone
            pass

    def _post_connection(self, connected: bool, words: str) -> None:
        self._post({"type": Kind.VIEWER_CONNECTION, "connected": connected, "words": words})

    # --- the GUI thread ------------------------------------------------------------------------------
    @Slot(object)  # a declared slot: the receiver PySide 6.8+ wants for signals emitted on other threads
    def _deliver(self, event: dict) -> None:
        if self._closed:
            return
        if event.get("type") == Kind.VIEWER_CONNECTION:
            self.connected = event["connected"]
            self.connection.emit(self.connected, event["words"])
            return
        seq = event.get("seq")
        if self.mode == "own" and seq is not None:
            if seq in self._seen:
                return  # replayed and delivered live
            self._seen.add(seq)
            if len(self._seen) > SEEN:
                self._seen = {s for s in self._seen if s > seq - SEEN // 2}
        self.event.emit(event)

    def is_news(self, event: dict) -> bool:
        """Whether an event happened since this window linked (a replayed old one is not notified again)."""
        return event.get("ts", time.time()) >= self.attached_at - 1.0


# --- handing over to a daemon ---------------------------------------------------------------------------
def spawn_daemon(command: list[str] | None = None) -> tuple[subprocess.Popen, Path]:
    """Start the daemon detached (its own session: it outlives the window); what it prints goes to
    <data dir>/logs/daemon.out (its own log is logs/daemon.log)."""
    return spawn_detached(command or daemon_command(), "daemon.out")


def spawn_detached(command: list[str], out_name: str) -> tuple[subprocess.Popen, Path]:
    """Start a process in its own session (it outlives this one), what it prints going to <data dir>/logs/out_name."""
    log_path = paths.data_dir() / "logs" / out_name
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, cwd=str(paths.CODE_ROOT), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=dict(os.environ))
    return proc, log_path


def wait_until(check: Callable[[], bool], timeout_s: float, poll_ms: int = POLL_MS) -> bool:
    """Run the GUI's events until check() or the deadline (no busy sleep: a local event loop with a poll timer)."""
    if check():
        return True
    deadline = time.monotonic() + timeout_s
    loop = QEventLoop()
    timer = QTimer()
    timer.setInterval(poll_ms)
    timer.timeout.connect(lambda: (check() or time.monotonic() > deadline) and loop.quit())
    timer.start()
    loop.exec()
    timer.stop()
    return check()


def hand_over(command: list[str] | None = None, timeout_s: float = HANDOVER_S) -> tuple[bool, str]:
    """Start the daemon and wait until it holds the data dir's lock (the window's runtime must be stopped first).
    Returns (ok, words)."""
    proc, log_path = spawn_daemon(command)

    def taken() -> bool:
        found = lock.holder()
        return (found is not None and found.get("role") == "daemon") or proc.poll() is not None

    wait_until(taken, timeout_s)
    found = lock.holder()
    if found is not None and found.get("role") == "daemon":
        return True, f"Learning goes on in the background (daemon pid {found['pid']})."
    if proc.poll() is None:
        why = f"it did not take over within {timeout_s:.0f} s"
    else:
        why = f"it exited with code {proc.returncode}"
    tail = ""
    try:
        tail = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:]
        tail = f" Its last words: {tail[0]}" if tail else ""
    except OSError:
        pass
    return False, (f"The background school did not start: {why}.{tail} Nothing schedules now; reopen the window "
                   f"(or run `nightschool daemon`) to go on. Log: {log_path}")
