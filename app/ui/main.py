"""GUI entry: QApplication + qasync loop, the store, the runtime (this window's own, or a daemon's it views), the main
window and its tray icon."""
from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import qasync
from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QApplication

from app.core.base.store import Store
from app.core.capture.sources import CaptureConfig
from app.core.queue.scheduler import Queue
from app.core.runtime import lock
from app.core.runtime.lock import RuntimeBusy
from app.core.runtime.supervisor import Runtime
from app.core.train.jobs import JobManager
from app.ui import gcguard, refguard
from app.ui.capture import CaptureController
from app.ui.datasets import DatasetsController
from app.ui.engine_check import offer as offer_engine
from app.ui.first_run import offer as offer_first_run
from app.ui.judge import JudgeController
from app.ui.main_window import MainWindow
from app.ui.queue import QueueController
from app.ui.runtime_link import RuntimeLink
from app.ui.school import SchoolController
from app.ui.ship import ShipController
from app.ui.theme import apply_dark
from app.ui.training import TrainingController
from app.ui.tray import Tray


def build_window(store: Store | None = None, capture_config: CaptureConfig | None = None,
                 watch: bool = True, tray: bool | None = None) -> MainWindow:
    """The window wired to a store; re-attaches to running jobs and replays their history.

    Who schedules: when no process holds the data dir's runtime lock, the window starts its own Runtime (role
    "window": the queue's scheduler, capture — following capture_config, else the saved settings; watch=False or the
    settings' watch off: no watcher —, the model-server keeper, the cycle orchestrator) and its tabs are views of it.
    When another process (the daemon) holds it, the window is a viewer: no runtime, no scheduling, no capture of its
    own; it reads the store and follows the daemon's status channel. tray: None asks Qt whether a tray host runs."""
    store = store or Store()
    config, problem = load_capture_config(capture_config)
    link, runtime = RuntimeLink(), None
    holder = lock.holder()
    if holder is None:
        runtime = Runtime(role="window", store=store, capture=watch and problem is None and config.watch,
                          capture_config=config)
        try:
            runtime.start()
        except RuntimeBusy as busy:  # a daemon took the lock in the meantime
            runtime, holder = None, busy.holder if busy.holder.get("channel") else None
    if runtime is not None:
        link.own(runtime)
        queue = QueueController(runtime.queue)  # the runtime ticks; the tab reads
        capture = CaptureController(store, config, watch=False, service=runtime.capture)
    else:
        link.view(holder)
        queue = QueueController(Queue(store, JobManager(store)))  # the daemon ticks
        pid = (holder or {}).get("pid")
        capture = CaptureController(store, config, watch=False,
                                    elsewhere=f"in the daemon (pid {pid})" if pid else "in the background process")
    # one manager: the queue launches the engines the Training tab follows
    controller = TrainingController(queue.queue.manager, queue=queue)
    school = SchoolController(store, link)
    window = MainWindow(controller, capture, DatasetsController(store), queue, JudgeController(store),
                        ShipController(store), school=school, link=link)
    link.event.connect(queue.on_runtime_event)
    link.event.connect(capture.on_runtime_event)
    window.tray = Tray(window, school, available=tray)
    controller.attach_all()
    queue.start()  # reads the queue every second (the runtime schedules)
    capture.start()
    school.start()
    # the model server runs again if the user left it on: the runtime's keeper does it (or the daemon's)
    if problem:
        capture.config_problem = problem
        capture.message.emit("error", f"Not capturing: {problem}")
    return window


def load_capture_config(given: CaptureConfig | None) -> tuple[CaptureConfig, str | None]:
    """The config to use and, when the saved one is damaged, why (the defaults are used, nothing is watched)."""
    if given is not None:
        return given, None
    try:
        return CaptureConfig.load(), None
    except ValueError as exc:
        return CaptureConfig(), str(exc)


def run_gui(on_ready: Callable[[MainWindow], None] | None = None, minimized: bool = False,
            files: Sequence[str] = (), first_run: bool | None = None) -> int:
    """Run the app until its last window closes; on_ready (tests, benchmarks) gets the window. minimized: only the
    tray icon where a tray host runs. files (the launcher's %F): imported as if dropped; the window shows.
    first_run: the first-run wizard over a shown window until finished or skipped (None: unless
    NIGHTSCHOOL_NO_FIRST_RUN=1)."""
    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("Nightschool")
    app.setDesktopFileName("nightschool")  # Wayland's app id: the launcher's icon and name (nightschool.desktop)
    refguard.install(app)  # PySide6 6.12 refcount bug: without it a long watched job aborts the app
    gcguard.install()  # cycles holding Qt objects are collected on this thread, never on a worker's
    apply_dark(app)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    closed = asyncio.Event()
    app.aboutToQuit.connect(closed.set)
    with loop:
        store = Store()
        window = build_window(store)
        window.ask_on_close = True  # closing a window that runs the school asks whether to keep learning
        why = show(window, minimized and not files)
        if why:
            print(f"nightschool: showing the window, not only the tray icon: {why}", file=sys.stderr)
        wizard = offer_first_run(window, store, first_run) if window.isVisible() else None  # noqa: F841 - held
        engine_check = offer_engine(window, store) if wizard is None else None  # noqa: F841 - held
        if files and window.capture_controller is not None:
            window.tabs.setCurrentWidget(window.capture)
            window.capture_controller.import_paths([str(Path(f).absolute()) for f in files])
        if on_ready:
            on_ready(window)
        loop.run_until_complete(closed.wait())
        dispose(app, window)
    return 0


def show(window: MainWindow, minimized: bool = False, quit_app: Callable[[], None] = QApplication.quit) -> str:
    """Show the window; minimized and a tray host runs: only the tray icon (its Open shows the window). Returns why a
    minimized start shows the window anyway ('' when it did as asked)."""
    if not minimized or window.tray is None or not window.tray.available:
        window.show()
        return "no system tray is available on this desktop" if minimized else ""
    window.installEventFilter(QuitWhenGone(window, quit_app))
    return ""


class QuitWhenGone(QObject):
    """Closing a window that was never shown (the tray's Quit after --minimized) does not end a Qt app by itself:
    this quits once neither the window nor the tray icon shows."""

    def __init__(self, window: MainWindow, quit_app: Callable[[], None]) -> None:
        super().__init__(window)
        self.quit_app = quit_app

    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.Type.Close:
            QTimer.singleShot(0, self._check)  # after the close was handled (or refused)
        return False

    def _check(self) -> None:
        window = self.parent()
        icon = window.tray.icon if window.tray is not None else None
        if not window.isVisible() and (icon is None or not icon.isVisible()):
            self.quit_app()


def dispose(app: QApplication, window: MainWindow) -> None:
    """Tear the window down while Qt is still alive: left to interpreter shutdown, PySide6 6.12 aborts
    (a refcount error while garbage-collecting widgets after the QApplication is gone)."""
    window.shutdown()  # the views stop (once), and this window's runtime too (e.g. the tray's Quit)
    window.deleteLater()
    app.processEvents()
    del window
    gc.collect()
