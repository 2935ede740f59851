"""The tray icon: the school's state at a glance (the app's icon with a state badge; its tooltip the real state: not
running / paused / idle / capturing / training cycle N (42 %) / judging / waits for approval / needs attention), a
menu (Open, Run a cycle now, Pause / Resume learning, Quit) and notifications for the events a person is told about
(bus.NOTIFY); for a team member also the team school's line in the tooltip and a notification once per newly
deployed team student (`team/words.DeployWatch` over the SchoolController's team reader). `Tray` is the shared part;
its owners: the tray process (`app/ui/tray/process.SessionTray`, what autostart and the window start: it outlives the
window) and, where that cannot run, the window itself (`WindowTray`, whose notifications go to the window's banner
when the desktop has no system tray)."""
from __future__ import annotations

from PySide6.QtCore import QObject, QTimer
from PySide6.QtGui import QAction, QPixmap
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from app.core.desktop.entries import PNG_DIR
from app.core.runtime.machinery.bus import Kind
from app.ui.school.controller import SchoolController
from app.ui.school.words import notice_text, team_line, tray_state, tray_tooltip
from app.ui.team.words import DeployWatch
from widgets.status_icon import badged_icon

STATES = {  # state -> (badge colour, glyph)
    "off": ("#6b7280", ""),
    "paused": ("#9ca3af", "II"),
    "idle": ("#2ecc71", ""),
    "capturing": ("#4f8cff", ""),
    "training": ("#ff9f43", ""),
    "judging": ("#a29bfe", ""),
    "approval": ("#f1c40f", "?"),
    "error": ("#e74c3c", "!"),
}
ICON_SIZES = (16, 24, 32, 48, 64, 128)  # the app's PNGs a tray may ask for (HiDPI panels take the larger)
CAPTURING_MS = 4000  # a capture shows this long
SHOW_MS = 15_000  # how long a notification stays
ERRORS = (Kind.CYCLE_FAILED, Kind.STAGE_FAILED, Kind.ALERT_FATAL, Kind.RUNTIME_ERROR)
LEVELS = {"info": QSystemTrayIcon.MessageIcon.Information, "error": QSystemTrayIcon.MessageIcon.Warning}


def app_pixmaps() -> list[QPixmap]:
    """The app's icon at the tray's sizes (resources/icons, rendered from the SVG); [] where they are missing."""
    found = [QPixmap(str(PNG_DIR / f"{size}.png")) for size in ICON_SIZES]
    return [p for p in found if not p.isNull()]


def state_icons() -> dict:
    bases = app_pixmaps()
    return {name: badged_icon(bases, colour, glyph, grey=name == "off") for name, (colour, glyph) in STATES.items()}


class Tray(QObject):
    """The icon, its menu and its notifications for one SchoolController. available: whether to show an icon (None:
    ask Qt whether a tray host runs); without one `elsewhere` says the notifications. Owners give open_window and
    quit."""

    quit_text = "Quit"

    def __init__(self, parent, school: SchoolController, available: bool | None = None) -> None:
        super().__init__(parent)  # the owner is its parent (no Python reference: no cycle keeps the window alive)
        self.school = school
        self.available = QSystemTrayIcon.isSystemTrayAvailable() if available is None else available
        self.state = ""
        self.failed = ""  # the last error's title: it shows until the next cycle starts
        self.notices: list[tuple[str, str, str]] = []  # (title, text, level) said, newest last
        self.deploys = DeployWatch()  # the team's deployed student, when this data dir is a member
        self._icons = state_icons()
        self._capturing = QTimer(self)
        self._capturing.setSingleShot(True)
        self._capturing.setInterval(CAPTURING_MS)
        self._capturing.timeout.connect(self._update)
        self.icon: QSystemTrayIcon | None = None
        self.menu = QMenu()
        self.state_action = QAction("", self.menu)  # the state in words, at the menu's top (not clickable)
        self.state_action.setEnabled(False)
        self.open_action = self._action("Open Nightschool", self.open_window)
        self.run_action = self._action("Run a cycle now", school.run_now)
        self.pause_action = self._action("Pause learning", lambda: school.toggle_pause())
        self.quit_action = self._action(self.quit_text, self.quit)
        self.menu.addAction(self.state_action)
        self.menu.addSeparator()
        self.menu.addAction(self.open_action)
        self.add_actions()
        self.menu.addSeparator()
        self.menu.addAction(self.run_action)
        self.menu.addAction(self.pause_action)
        self.menu.addSeparator()
        self.menu.addAction(self.quit_action)
        if self.available:
            self.icon = QSystemTrayIcon(self._icons["off"], self)
            self.icon.setContextMenu(self.menu)
            self.icon.messageClicked.connect(self.open_window)
            self.icon.activated.connect(self._on_activated)
            self.icon.show()
        school.notice.connect(self.notify)
        school.changed.connect(self._update)
        if school.link is not None:
            school.link.event.connect(self.on_event)
            school.link.connection.connect(self._on_connection)
        if school.team is not None:
            school.team.changed.connect(self._on_team)
        self._update()

    def _action(self, text: str, slot) -> QAction:
        action = QAction(text, self.menu)
        action.triggered.connect(lambda _checked=False: slot())
        return action

    # --- what owners give ---------------------------------------------------------------------------------
    def add_actions(self) -> None:
        """Owner-specific actions, placed after Open."""

    def open_window(self) -> None:
        raise NotImplementedError

    def quit(self) -> None:
        raise NotImplementedError

    def elsewhere(self, level: str, text: str) -> None:
        """A notification where there is no icon to show it."""

    # --- state -------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """Whether a runtime schedules: this window's own, or the one its link views (connected)."""
        link = self.school.link
        return link is None or link.mode == "own" or link.connected

    def _on_connection(self, _connected: bool, _words: str) -> None:
        self.school.refresh_soon()
        self._update()

    def on_event(self, event: dict) -> None:
        kind = event.get("type")
        if kind == Kind.CAPTURE:
            self._capturing.start()
        elif kind in ERRORS and (self.school.link is None or self.school.link.is_news(event)):
            self.failed = notice_text(event)[0]
        elif kind in (Kind.CYCLE_STARTED, Kind.CYCLE_STAGE, Kind.CYCLE_DONE, Kind.CYCLE_REFUSED):
            self.failed = ""
        elif kind != Kind.CYCLE_PROGRESS:  # progress: the tooltip's percentage
            return
        self._update()

    def _update(self) -> None:
        status = self.school.status
        state = tray_state(status, bool(self.failed), running=self.running)
        if state == "idle" and self._capturing.isActive():
            state = "capturing"
        tip = tray_tooltip(state, status, self.school.last_progress, self.failed, self.where())
        if self.school.team_member:
            tip += "\n" + team_line(self.school.team.view, self.school.team.offline_since)
        self.set_state(state, tip)
        paused = self.school.paused
        self.pause_action.setText("Resume learning" if paused else "Pause learning")
        cycle = (status or {}).get("cycle")
        self.run_action.setEnabled(self.running and status is not None and cycle is None and not paused)

    def where(self) -> str:
        link = self.school.link
        if link is None or link.mode == "own":
            return "runs in this window"
        if link.connected:
            return f"runs in the {link.role or 'background'} (pid {link.pid})"
        return ""

    def set_state(self, state: str, tip: str) -> None:
        changed, self.state, self.tip = state != self.state, state, tip
        words = tip.splitlines()[0].removeprefix("Nightschool — ")
        self.state_action.setText(words[:1].upper() + words[1:])
        if self.icon is None:
            return
        if changed:
            self.icon.setIcon(self._icons[state])
        if tip != self.icon.toolTip():
            self.icon.setToolTip(tip)

    def tooltip(self) -> str:
        return self.tip

    # --- notifications ---------------------------------------------------------------------------------------
    def notify(self, event: dict) -> None:
        title, text, level = notice_text(event)
        if event.get("type") == Kind.STAGE_FAILED and any(t.startswith(f"Cycle {event.get('cycle')} failed")
                                                       for t, _, _ in self.notices[-3:]):
            return  # the cycle's own failure already said it
        self.say(title, text, level)

    def _on_team(self) -> None:
        """A team read: a newly deployed team student is said once (an unreachable server says nothing)."""
        view = self.school.team.view
        news = self.deploys.see(view.status if view.member else None)
        if news:
            title, _, text = news.partition(": ")
            self.say(title, text, "info")

    def say(self, title: str, text: str, level: str) -> None:
        self.notices.append((title, text, level))
        if self.icon is not None:
            self.icon.showMessage(title, text, LEVELS.get(level, LEVELS["info"]), SHOW_MS)
        else:
            self.elsewhere(level, f"{title} — {text}" if text else title)

    def _on_activated(self, reason) -> None:
        if reason in (QSystemTrayIcon.ActivationReason.Trigger, QSystemTrayIcon.ActivationReason.DoubleClick):
            self.open_window()

    def hide(self) -> None:
        if self.icon is not None:
            self.icon.hide()


class WindowTray(Tray):
    """The window's own icon, used only where no tray process shows the school (see app/ui/main.run_gui); without a
    tray host the window's banner says the notifications."""

    @property
    def window(self):
        return self.parent()

    def open_window(self) -> None:
        self.window.showNormal()
        self.window.raise_()
        self.window.activateWindow()
        if self.window.school is not None:
            self.window.tabs.setCurrentWidget(self.window.school)

    def quit(self) -> None:
        self.window.close_asking()  # the window asks whether to keep learning when it runs the school

    def elsewhere(self, level: str, text: str) -> None:
        self.window.banner.show_message(level, text)
