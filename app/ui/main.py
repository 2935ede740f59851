"""GUI entry: QApplication + qasync loop, the store, the runtime (this window's own, or a daemon's it views), the main
window, and the tray: the tray process (started here where a tray host runs and none runs yet, so closing the window
never takes the icon with it), else the window's own icon or banner."""
from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import qasync
from PySide6.QtWidgets import QApplication, QSystemTrayIcon

from app.core.base.store import Store
from app.core.capture.sources import CaptureConfig
from app.core.queue.scheduler import Queue
from app.core.runtime.machinery import lock
from app.core.runtime.machinery.lock import RuntimeBusy
from app.core.runtime.supervisor import Runtime
from app.core.train.jobs import JobManager
from app.ui import gcguard, refguard, startup
from app.ui.capture.controller import CaptureController
from app.ui.datasets.controller import DatasetsController
from app.ui.engine_check import offer as offer_engine
from app.ui.first_run.wizard import offer as offer_first_run
from app.ui.judge.controller import JudgeController
from app.ui.main_window import MainWindow
from app.ui.queue.controller import QueueController
from app.ui.runtime_link import RuntimeLink, app_command, spawn_detached
from app.ui.school.controller import SchoolController
from app.ui.ship.controller import ShipController
from app.ui.theme import apply_dark
from app.ui.training.controller import TrainingController
from app.ui.tray.icon import WindowTray
from app.ui.window_door import WindowDoor


def build_window(store: Store | None = None, capture_config: CaptureConfig | None = None,
                 watch: bool = True, tray: bool | None = None) -> MainWindow:
    """The window wired to a store; re-attaches to running jobs and replays their history.

    Who schedules: when no process holds the data dir's runtime lock, the window starts its own Runtime (role
    "window": the queue's scheduler, capture — following capture_config, else the saved settings; watch=False or the
    settings' watch off: no watcher —, the model-server keeper, the cycle orchestrator) and its tabs are views of it.
    When another process (the daemon) holds it, the window is a viewer: no runtime, no scheduling, no capture of its
    own; it reads the store and follows the daemon's status channel. tray: whether the window shows its own tray icon
    (None: where a tray host runs; run_gui passes False when the tray process shows the school)."""
    store = store or Store()
    config, problem = load_capture_config(capture_config)
    link = RuntimeLink()
    queue, capture = _schedule_or_view(store, config, watch and problem is None and config.watch, link)
    # one manager: the queue launches the engines the Training tab follows
    controller = TrainingController(queue.queue.manager, queue=queue)
    school = SchoolController(store, link)
    window = (startup.take_shell() or MainWindow()).attach(  # the window `nightschool gui` painted first, if any
        controller, capture, DatasetsController(store), queue, JudgeController(store), ShipController(store),
        school=school, link=link)
    link.event.connect(queue.on_runtime_event)
    link.event.connect(capture.on_runtime_event)
    window.tray = WindowTray(window, school, available=tray)
    controller.attach_all()
    queue.start()  # reads the queue every second (the runtime schedules)
    capture.start()
    school.start()
    # the model server runs again if the user left it on: the runtime's keeper does it (or the daemon's)
    if problem:
        capture.config_problem = problem
        capture.message.emit("error", f"Not capturing: {problem}")
    return window


def _schedule_or_view(store: Store, config: CaptureConfig, capture_on: bool,
                      link: RuntimeLink) -> tuple[QueueController, CaptureController]:
    """The queue's and capture's controllers: of the window's own Runtime when no process holds the data dir's lock
    (the window schedules and captures), else views of the store while the holder (the daemon) does."""
    runtime = None
    holder = lock.holder()
    if holder is None:
        runtime = Runtime(role="window", store=store, capture=capture_on, capture_config=config)
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
    return queue, capture


def load_capture_config(given: CaptureConfig | None) -> tuple[CaptureConfig, str | None]:
    """The config to use and, when the saved one is damaged, why (the defaults are used, nothing is watched)."""
    if given is not None:
        return given, None
    try:
        return CaptureConfig.load(), None
    except ValueError as exc:
        return CaptureConfig(), str(exc)


def run_gui(on_ready: Callable[[MainWindow], None] | None = None, files: Sequence[str] = (),
            first_run: bool | None = None) -> int:
    """Run the app until its last window closes; on_ready (tests, benchmarks) gets the window. files (the launcher's
    %F): imported as if dropped. first_run: the first-run wizard over the window until finished or skipped (None:
    unless NIGHTSCHOOL_NO_FIRST_RUN=1)."""
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
        window = build_window(store, tray=False if start_tray() else None)
        window.ask_on_close = True  # closing a window that runs the school asks whether to keep learning
        door = WindowDoor(window.tray.open_window, window)  # the tray's Open raises this window
        window.show()
        wizard = offer_first_run(window, store, first_run)  # noqa: F841 - held
        engine_check = offer_engine(window, store) if wizard is None else None  # noqa: F841 - held
        if files and window.capture_controller is not None:
            window.tabs.setCurrentWidget(window.capture)
            window.capture_controller.import_paths([str(Path(f).absolute()) for f in files])
        if on_ready:
            on_ready(window)
        loop.run_until_complete(closed.wait())
        door.close()  # its socket file goes
        dispose(app, window)
    return 0


def start_tray() -> bool:
    """Whether the tray process shows the school: one runs in this session, or a tray host runs and one is started
    now (detached: it outlives the window). Then the window makes no icon of its own; else it keeps its own."""
    if lock.SessionLock.held_by(lock.TRAY) is not None:
        return True
    if not QSystemTrayIcon.isSystemTrayAvailable():
        return False
    spawn_detached(app_command("tray"), "tray.out")
    return True


def dispose(app: QApplication, window: MainWindow) -> None:
    """Tear the window down while Qt is still alive: left to interpreter shutdown, PySide6 6.12 aborts
    (a refcount error while garbage-collecting widgets after the QApplication is gone)."""
    window.shutdown()  # the views stop (once), and this window's runtime too (e.g. the tray's Quit)
    window.deleteLater()
    app.processEvents()
    del window
    gc.collect()
