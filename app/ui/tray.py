"""The tray icon: the school's state at a glance (idle / capturing / training / judging / error), a menu (Open, Run a
cycle now, Pause learning, Quit) and notifications for the events a person is told about (bus.NOTIFY). Where the
desktop has no system tray the notifications go to the window's banner instead."""
from __future__ import annotations

from PySide6.QtCore import QObject, QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from app.ui.school import SchoolController
from app.ui.school_words import notice_text, tray_state
from widgets.status_icon import dot_icon

STATES = {  # state -> (colour, glyph, words)
    "idle": ("#6b7280", "", "idle"),
    "capturing": ("#4f8cff", "", "capturing"),
    "training": ("#ff9f43", "", "training"),
    "judging": ("#a29bfe", "", "judging"),
    "error": ("#e74c3c", "!", "needs attention"),
}
CAPTURING_MS = 4000  # a capture shows this long
SHOW_MS = 15_000  # how long a notification stays
ERRORS = ("cycle.failed", "stage.failed", "alert.fatal", "runtime.error")
LEVELS = {"info": QSystemTrayIcon.MessageIcon.Information, "error": QSystemTrayIcon.MessageIcon.Warning}


class Tray(QObject):
    """available: whether a tray host runs (None: ask Qt). Without one there is no icon and `notify` shows the
    window's banner."""

    def __init__(self, window, school: SchoolController, available: bool | None = None) -> None:
        super().__init__(window)  # the window is its parent (no Python reference: no cycle keeps the window alive)
        self.school = school
        self.available = QSystemTrayIcon.isSystemTrayAvailable() if available is None else available
        self.state = "idle"
        self.failed = False  # an error shows until the next cycle starts
        self.notices: list[tuple[str, str, str]] = []  # (title, text, level) said, newest last
        self._icons = {name: dot_icon(colour, glyph) for name, (colour, glyph, _) in STATES.items()}
        self._capturing = QTimer(self)
        self._capturing.setSingleShot(True)
        self._capturing.setInterval(CAPTURING_MS)
        self._capturing.timeout.connect(self._update)
        self.icon: QSystemTrayIcon | None = None
        self.menu = QMenu()
        self.open_action = QAction("Open Nightschool", self.menu)
        self.open_action.triggered.connect(self.open_window)
        self.run_action = QAction("Run a cycle now", self.menu)
        self.run_action.triggered.connect(school.run_now)
        self.pause_action = QAction("Pause learning", self.menu)
        self.pause_action.setCheckable(True)
        self.pause_action.triggered.connect(lambda _checked: school.toggle_pause())
        self.quit_action = QAction("Quit", self.menu)
        self.quit_action.triggered.connect(self.quit)
        self.menu.addAction(self.open_action)
        self.menu.addSeparator()
        self.menu.addAction(self.run_action)
        self.menu.addAction(self.pause_action)
        self.menu.addSeparator()
        self.menu.addAction(self.quit_action)
        if self.available:
            self.icon = QSystemTrayIcon(self._icons["idle"], self)
            self.icon.setContextMenu(self.menu)
            self.icon.messageClicked.connect(self.open_window)
            self.icon.activated.connect(self._on_activated)
            self.icon.show()
        school.notice.connect(self.notify)
        school.changed.connect(self._update)
        if school.link is not None:
            school.link.event.connect(self.on_event)
        self._update()

    @property
    def window(self):
        return self.parent()

    # --- state -------------------------------------------------------------------------------------------
    def on_event(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "capture":
            self._capturing.start()
        elif kind in ERRORS and (self.school.link is None or self.school.link.is_news(event)):
            self.failed = True
        elif kind in ("cycle.started", "cycle.stage", "cycle.done", "cycle.refused"):
            self.failed = False
        else:
            return
        self._update()

    def _update(self) -> None:
        state = tray_state(self.school.status, self.failed)
        if state == "idle" and self._capturing.isActive():
            state = "capturing"
        self.set_state(state)
        paused = self.school.paused
        self.pause_action.setChecked(paused)
        self.pause_action.setText("Learning paused (click to resume)" if paused else "Pause learning")
        cycle = (self.school.status or {}).get("cycle")
        self.run_action.setEnabled(self.school.status is not None and cycle is None and not paused)

    def set_state(self, state: str) -> None:
        changed, self.state = state != self.state, state
        if self.icon is None:
            return
        if changed:
            self.icon.setIcon(self._icons[state])
        tip = self.tooltip()
        if tip != self.icon.toolTip():
            self.icon.setToolTip(tip)

    def tooltip(self) -> str:
        cycle = (self.school.status or {}).get("cycle")
        words = STATES[self.state][2]
        if cycle is not None:
            words += f" — cycle {cycle['id']}, {cycle['stage']}"
        return f"Nightschool: {words}"

    # --- notifications ---------------------------------------------------------------------------------------
    def notify(self, event: dict) -> None:
        title, text, level = notice_text(event)
        if event.get("type") == "stage.failed" and any(t.startswith(f"Cycle {event.get('cycle')} failed")
                                                       for t, _, _ in self.notices[-3:]):
            return  # the cycle's own failure already said it
        self.notices.append((title, text, level))
        if self.icon is not None:
            self.icon.showMessage(title, text, LEVELS.get(level, LEVELS["info"]), SHOW_MS)
        else:
            self.window.banner.show_message(level, f"{title} — {text}" if text else title)

    # --- menu ----------------------------------------------------------------------------------------------
    def _on_activated(self, reason) -> None:
        if reason in (QSystemTrayIcon.ActivationReason.Trigger, QSystemTrayIcon.ActivationReason.DoubleClick):
            self.open_window()

    def open_window(self) -> None:
        self.window.showNormal()
        self.window.raise_()
        self.window.activateWindow()
        self.window.tabs.setCurrentWidget(self.window.school)

    def quit(self) -> None:
        self.window.close_asking()  # the window asks whether to keep learning when it runs the school

    def hide(self) -> None:
        if self.icon is not None:
            self.icon.hide()
