"""Main window: hosts the panels (the School tab first), routes dropped files and folders, and leaves jobs running when
it closes; when it runs the school itself, closing (or File ▸ Quit, Ctrl+Q) asks whether to keep learning in the
background (a daemon).
Built bare (no controller: the named tabs, "Starting…"), it is the window `nightschool gui` paints first
(app/ui/startup.py); `attach` then builds the panels into it, one per row of app/ui/tabs.TABS, each imported then."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QDragEnterEvent, QDropEvent, QIcon, QKeySequence
from PySide6.QtWidgets import QApplication, QLabel, QMainWindow, QMessageBox, QTabWidget, QVBoxLayout, QWidget

from app.core.base.refs import load
from app.ui.tabs import TABS
from widgets.banner import Banner

if TYPE_CHECKING:
    from app.ui.capture.controller import CaptureController
    from app.ui.datasets.controller import DatasetsController
    from app.ui.judge.controller import JudgeController
    from app.ui.queue.controller import QueueController
    from app.ui.runtime_link import RuntimeLink
    from app.ui.school.controller import SchoolController
    from app.ui.ship.controller import ShipController
    from app.ui.team.controller import TeamController
    from app.ui.training.controller import TrainingController

RESOURCES = Path(__file__).resolve().parents[2] / "resources"


class MainWindow(QMainWindow):
    """ask_on_close: when the person closes a window that runs the school (its close button, the tray's Quit), it
    asks "Keep learning in the background?" (run_gui sets it; tests leave it off and get "no"; a programmatic quit
    never asks: it stops). daemon_command: what starts the daemon (None: `python -m app.cli.main daemon`)."""

    def __init__(self, controller: TrainingController | None = None, capture: CaptureController | None = None,
                 datasets: DatasetsController | None = None, queue: QueueController | None = None,
                 judge: JudgeController | None = None, ship: ShipController | None = None,
                 school: SchoolController | None = None, link: RuntimeLink | None = None,
                 team: TeamController | None = None) -> None:
        super().__init__()
        self.link, self.runtime, self.controller = None, None, None  # until attach; controller: the Training tab's
        for tab in TABS:  # each tab's panel and controller, as `<key>` and `<key>_controller`
            setattr(self, tab.key, None)
            setattr(self, f"{tab.key}_controller", None)
        self.ask_on_close = False
        self.daemon_command: list[str] | None = None
        self.handover: tuple[bool, str] | None = None  # (ok, words) of the hand-over to the daemon at close
        self.tray = None  # app.ui.tray.icon.Tray, set by build_window
        self.engine_wizard = None  # app.ui.engine_check.EngineWizard when the engine needed work at start
        self._shut = False
        self._close_asks = False
        self.setWindowTitle("Nightschool")
        icon = RESOURCES / "nightschool.svg"
        if icon.is_file():
            self.setWindowIcon(QIcon(str(icon)))
        self.resize(1180, 740)
        self.tabs = QTabWidget()
        for tab in TABS:  # until attach: the tabs by name, each saying it is starting
            starting = QLabel("Starting…")
            starting.setAlignment(Qt.AlignmentFlag.AlignCenter)
            self.tabs.addTab(starting, tab.title)
        self.banner = Banner()  # notifications when the desktop has no system tray
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.banner)
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)
        self.statusBar().showMessage("Starting…")
        self.quit_action = self._file_menu()
        if controller is not None:
            self.attach(controller, capture, datasets, queue, judge, ship, school, link, team)

    def _file_menu(self) -> QAction:
        """File ▸ Quit (Ctrl+Q) closes as the close button does; the window holds it too (no menu bar: still fires)."""
        quit_action = QAction("&Quit", self)
        # the platform's Quit key (Ctrl+Q on Linux and macOS); Ctrl+Q where it names none (Windows, offscreen)
        quit_action.setShortcuts(QKeySequence.keyBindings(QKeySequence.StandardKey.Quit) or [QKeySequence("Ctrl+Q")])
        quit_action.setMenuRole(QAction.MenuRole.QuitRole)
        quit_action.triggered.connect(self.close_asking)
        self.menuBar().addMenu("&File").addAction(quit_action)
        self.addAction(quit_action)
        return quit_action

    def attach(self, controller: TrainingController, capture: CaptureController | None = None,
               datasets: DatasetsController | None = None, queue: QueueController | None = None,
               judge: JudgeController | None = None, ship: ShipController | None = None,
               school: SchoolController | None = None, link: RuntimeLink | None = None,
               team: TeamController | None = None) -> MainWindow:
        """Build the panels over the controllers into this window, one tab per row of TABS in its order (the tab the
        person chose while it started stays chosen). A tab given no controller gets one of its own on the training
        controller's store where its row names one (Judge, Ship, Experience, Team: the School tab then reads the team
        school through the Team tab's), else it is not shown."""
        given = {"training": controller, "capture": capture, "datasets": datasets, "queue": queue, "judge": judge,
                 "ship": ship, "school": school, "team": team}
        chosen = self.tabs.tabText(self.tabs.currentIndex())
        while self.tabs.count():
            starting = self.tabs.widget(0)
            self.tabs.removeTab(0)
            starting.deleteLater()
        self.link = link
        self.runtime = link.runtime if link is not None and link.mode == "own" else None
        self.controller = controller
        for tab in TABS:
            made = given.get(tab.key)
            if made is None and tab.controller is not None:
                made = load(tab.controller)(controller.manager.store)
            setattr(self, f"{tab.key}_controller", made)
            if made is None:
                continue
            panel = load(tab.panel)(made)
            setattr(self, tab.key, panel)
            self.tabs.addTab(panel, tab.title)
            if tab.status:
                made.message.connect(self.show_status)
        if queue is not None:  # the Training tab lists queued jobs and follows them once started
            queue.added.connect(controller.track)
            queue.started.connect(controller.track)
            queue.entries_changed.connect(controller.sync)
        if self.school_controller is not None and self.school_controller.team is None:
            self.school_controller.follow_team(self.team_controller)  # one read of the team school for both tabs
        for tab in TABS:
            if tab.starts:
                getattr(self, f"{tab.key}_controller").start()
        self.tabs.setCurrentIndex(next((i for i in range(self.tabs.count()) if self.tabs.tabText(i) == chosen), 0))
        self.setAcceptDrops(True)
        self.statusBar().showMessage("Drop a chat .jsonl file to queue a training job on the selected model; "
                                     "drop transcripts, folders or datasets to capture them.")
        return self

    def show_status(self, _level: str, text: str) -> None:
        self.statusBar().showMessage(text, 15000)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls() and any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        """On the Queue tab files are queued; on the Training tab one chat file is queued; everything else is
        imported by Capture."""
        from app.ui.capture.controller import is_chat_file, redirect_note

        if self.controller is None:  # still starting: nothing to route it to yet
            event.ignore()
            return
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        event.acceptProposedAction()
        if self.school is not None and self.tabs.currentWidget() is self.school:
            self.tabs.setCurrentWidget(self.training)  # the landing tab: a drop is handled (and shown) on Training
        if self.queue is not None and self.tabs.currentWidget() is self.queue:
            self.queue.add_files(paths)
            return
        on_training = self.tabs.currentWidget() is self.training
        if self.capture_controller is None or (on_training and len(paths) == 1 and is_chat_file(paths[0])):
            for path in paths:
                self.training.start(path)
            return
        if on_training and len(paths) == 1 and Path(paths[0]).is_file():
            self.training.show_message("error", redirect_note(paths[0]))
        if paths:
            self.capture_controller.import_paths(paths)

    def closeEvent(self, event) -> None:
        """Closing the window stops following the jobs (the engines keep training), stops its views and, when it runs
        the school itself, its runtime — after asking whether a daemon should keep learning in the background."""
        keep = False
        asked = event.spontaneous() or self._close_asks  # the person closed it (not a programmatic quit)
        if self.runtime is not None and self.ask_on_close and asked and not self._shut:
            answer = self.ask_keep_learning()
            if answer is None:
                event.ignore()
                return
            keep = answer
        self.shutdown(keep)
        super().closeEvent(event)

    def close_asking(self) -> bool:
        """Close as the person's own request (File ▸ Quit, the tray's Quit): asks like the close button does."""
        self._close_asks = True
        try:
            return self.close()
        finally:
            self._close_asks = False

    def ask_keep_learning(self) -> bool | None:
        """Yes → True, No → False, Cancel → None (the window stays open)."""
        buttons = (QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No
                   | QMessageBox.StandardButton.Cancel)
        answer = QMessageBox.question(
            self, "Keep learning?",
            "Keep learning in the background?\n\nYes: a background process (the daemon) goes on capturing, "
            "scheduling and running cycles; reopen the window to watch it.\nNo: everything stops until the window "
            "is opened again (running trainings finish on their own).", buttons, QMessageBox.StandardButton.Yes)
        if answer == QMessageBox.StandardButton.Cancel:
            return None
        return answer == QMessageBox.StandardButton.Yes

    def shutdown(self, keep_learning: bool = False) -> None:
        """Stop the views and this window's runtime (once); keep_learning: then hand the school to the daemon."""
        if self._shut:
            return
        self._shut = True
        if self.controller is None:  # closed while it started: nothing was built to stop
            return
        self._stop_views()
        if self.tray is not None:
            self.tray.hide()
        if self.link is not None:
            self.link.stop()
        if self.runtime is None:
            return
        self.runtime.stop()  # the lock is free: the daemon can take it
        if not keep_learning:
            return
        from app.ui.runtime_link import hand_over

        self.statusBar().showMessage("Handing the school over to the background process…")
        QApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            self.handover = hand_over(self.daemon_command)
        finally:
            QApplication.restoreOverrideCursor()
        if not self.handover[0] and self.ask_on_close:
            QMessageBox.warning(self, "Not learning in the background", self.handover[1])

    def _stop_views(self) -> None:
        """Each tab's controller stops as its row says (a running step finishes on its own and its outcome is dropped;
        an export is cancelled), and the Judge tab's blind test's controller."""
        for tab in TABS:
            made = getattr(self, f"{tab.key}_controller")
            if made is not None:
                getattr(made, tab.stop)()
        self.judge.blind.controller.stop()
