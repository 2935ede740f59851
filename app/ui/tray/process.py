"""`nightschool tray`: the tray icon as its own light process (no window), what autostart and the window start. It is a
viewer of whichever runtime holds the data dir — the daemon or a window's own — through the same RuntimeLink and
SchoolController as the window (it never takes the runtime lock, never schedules), and re-attaches when the holder
changes (window closed → daemon). One per login session (lock.SessionLock "tray"). Open raises the running window
(window_door) or starts `nightschool gui`; when nothing runs the school its menu offers to start learning in the
background. What it does is logged on stdout (logs/tray.out when the window started it)."""
from __future__ import annotations

import gc
import signal
import subprocess
import sys
import time

from PySide6.QtCore import QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QApplication, QSystemTrayIcon

from app.core.base.store import Store
from app.core.runtime.machinery import lock
from app.ui import gcguard, refguard
from app.ui.runtime_link import RuntimeLink, app_command, spawn_daemon, spawn_detached
from app.ui.school.controller import SchoolController
from app.ui.team.controller import TeamReader, tray_poll_ms
from app.ui.theme import apply_dark
from app.ui.tray.icon import Tray
from app.ui.window_door import knock

HOST_POLL_MS = 2000  # a tray host that appears later (the panel starts after autostart) gets the icon then
OPEN_WAIT_S = 30.0  # a window being started is not started again (a double click) for this long


def say(text: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} nightschool tray: {text}", flush=True)


class SessionTray(Tray):
    """The tray process's icon: always an icon (a tray host that comes later shows it); Quit ends only the tray."""

    quit_text = "Quit tray"

    def __init__(self, school: SchoolController, parent=None) -> None:
        self._window: subprocess.Popen | None = None
        self._window_at = 0.0
        self._said = ""
        super().__init__(parent, school, available=True)
        self.host = QSystemTrayIcon.isSystemTrayAvailable()
        if not self.host:
            say("no system tray runs on this desktop yet: the icon shows once one does")
        self._host_timer = QTimer(self)
        self._host_timer.setInterval(HOST_POLL_MS)
        self._host_timer.timeout.connect(self._watch_host)
        self._host_timer.start()

    def add_actions(self) -> None:
        self.start_action = QAction("Start learning in the background", self.menu)
        self.start_action.triggered.connect(lambda _checked=False: self.start_learning())
        self.menu.addAction(self.start_action)

    def _update(self) -> None:
        super()._update()
        self.start_action.setVisible(not self.running)
        line = self.tip.splitlines()[0]
        if line != self._said:  # the log says each state once (not each progress step)
            self._said = line
            if not line.endswith("%)"):
                say(f"{line} — {self.where() or 'nothing runs the school'}")

    def _watch_host(self) -> None:
        host = QSystemTrayIcon.isSystemTrayAvailable()
        if host and not self.host:
            say("a system tray appeared: showing the icon")
            self.icon.hide()
            self.icon.show()
        self.host = host

    def say(self, title: str, text: str, level: str) -> None:
        super().say(title, text, level)
        say(f"notified: {title}" + (f" — {text}" if text else ""))

    # --- the menu ------------------------------------------------------------------------------------
    def open_window(self) -> None:
        """Raise the running window, else start one (once: a double click does not start two)."""
        if knock():
            say("asked the open window to show itself")
            return
        if (self._window is not None and self._window.poll() is None
                and time.monotonic() - self._window_at < OPEN_WAIT_S):
            return  # one is starting
        self._window, log_path = spawn_detached(app_command("gui"), "window.out")
        self._window_at = time.monotonic()
        say(f"started the window (pid {self._window.pid}, output in {log_path})")

    def start_learning(self) -> None:
        if lock.holder() is not None:
            return
        proc, log_path = spawn_daemon()
        say(f"started learning in the background (daemon pid {proc.pid}, output in {log_path})")

    def quit(self) -> None:
        QApplication.quit()


def build_tray(store: Store | None = None) -> SessionTray:
    """The tray on a store, viewing whichever runtime holds the data dir (or waiting for one); a member's tray also
    asks the team server every `team.tray_poll_s` seconds (settings; default 120)."""
    store = store or Store()
    link = RuntimeLink()
    school = SchoolController(store, link)
    team = TeamReader(tray_poll_ms(store))
    school.follow_team(team)
    tray = SessionTray(school)
    for child in (link, school, team):
        child.setParent(tray)
    link.view(lock.holder())
    school.start()
    team.start()
    return tray


def run_tray(held: lock.SessionLock, learn: bool = False) -> int:
    """The tray process until its Quit (or a signal), holding the session's tray lock (`held`, taken by the caller
    before Qt loads: a second tray leaves at once). learn: when nothing runs the school, start the daemon first
    (autostart: learning goes on from login as it did when autostart opened a hidden window)."""
    if learn and lock.holder() is None:
        proc, log_path = spawn_daemon()
        say(f"nothing ran the school: started learning in the background (daemon pid {proc.pid}, output in "
            f"{log_path})")
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Nightschool")
    app.setDesktopFileName("nightschool")
    app.setQuitOnLastWindowClosed(False)  # the menu is its only window
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)  # the kernel drops the session lock; the icon goes with the process
    refguard.install(app)
    gcguard.install()
    apply_dark(app)
    tray = build_tray()
    try:
        app.exec()
    finally:
        tray.school.stop()
        tray.school.team.stop()
        tray.school.link.stop()
        tray.hide()
        tray.deleteLater()
        app.processEvents()
        del tray
        gc.collect()
        held.release()
    return 0
