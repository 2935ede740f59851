"""GUI entry: QApplication + qasync loop, the store and job manager, the main window."""
from __future__ import annotations

import asyncio
import gc
import sys
from typing import Callable

import qasync
from PySide6.QtWidgets import QApplication

from app.core.base.store import Store
from app.core.capture.sources import CaptureConfig
from app.core.queue.scheduler import Queue
from app.core.train.jobs import JobManager
from app.ui import refguard
from app.ui.capture import CaptureController
from app.ui.datasets import DatasetsController
from app.ui.judge import JudgeController
from app.ui.main_window import MainWindow
from app.ui.queue import QueueController
from app.ui.ship import ShipController
from app.ui.theme import apply_dark
from app.ui.training import TrainingController


def build_window(store: Store | None = None, capture_config: CaptureConfig | None = None,
                 watch: bool = True) -> MainWindow:
    """The window wired to a store; re-attaches to running jobs and replays their history, starts the queue's
    scheduler (it goes on with what was queued or running) and starts capturing (the watcher follows capture_config,
    else the saved settings; watch=False or settings' watch off: no watcher)."""
    store = store or Store()
    manager = JobManager(store)  # one manager: the queue launches the engines the Training tab follows
    queue = QueueController(Queue(store, manager))
    controller = TrainingController(manager, queue=queue)
    config, problem = load_capture_config(capture_config)
    capture = CaptureController(store, config, watch=watch and problem is None)
    window = MainWindow(controller, capture, DatasetsController(store), queue, JudgeController(store),
                        ShipController(store))
    controller.attach_all()
    queue.start()
    capture.start()
    window.ship_controller.resume_serving()  # on its worker thread: the server runs again if the user left it on
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


def run_gui(on_ready: Callable[[MainWindow], None] | None = None) -> int:
    """Run the app until its last window closes; on_ready (tests, benchmarks) gets the shown window."""
    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("Nightschool")
    refguard.install(app)  # PySide6 6.12 refcount bug: without it a long watched job aborts the app
    apply_dark(app)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    closed = asyncio.Event()
    app.aboutToQuit.connect(closed.set)
    with loop:
        window = build_window()
        window.show()
        if on_ready:
            on_ready(window)
        loop.run_until_complete(closed.wait())
        dispose(app, window)
    return 0


def dispose(app: QApplication, window: MainWindow) -> None:
    """Tear the window down while Qt is still alive: left to interpreter shutdown, PySide6 6.12 aborts
    (a refcount error while garbage-collecting widgets after the QApplication is gone)."""
    window.controller.detach()
    if window.queue_controller is not None:
        window.queue_controller.stop()
    if window.capture_controller is not None:
        window.capture_controller.stop()
    if window.datasets_controller is not None:
        window.datasets_controller.stop()
    window.judge_controller.stop()
    window.ship_controller.stop()
    window.deleteLater()
    app.processEvents()
    del window
    gc.collect()
