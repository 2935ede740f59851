"""GUI entry: QApplication + qasync loop, the store and job manager, the main window."""
from __future__ import annotations

import asyncio
import gc
import sys
from typing import Callable

import qasync
from PySide6.QtWidgets import QApplication

from app.core.jobs import JobManager
from app.core.store import Store
from app.ui.main_window import MainWindow
from app.ui.theme import apply_dark
from app.ui.training import TrainingController


def build_window(store: Store | None = None) -> MainWindow:
    """The window wired to a store; re-attaches to running jobs and replays their history."""
    controller = TrainingController(JobManager(store or Store()))
    window = MainWindow(controller)
    controller.attach_all()
    return window


def run_gui(on_ready: Callable[[MainWindow], None] | None = None) -> int:
    """Run the app until its last window closes; on_ready (tests, benchmarks) gets the shown window."""
    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("Nightschool")
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
    window.deleteLater()
    app.processEvents()
    del window
    gc.collect()
