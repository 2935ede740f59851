"""The real app process quits cleanly (exit code 0) after showing a job's history — no abort at shutdown."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import fast_hyper

REPO = Path(__file__).resolve().parents[2]
CHILD = """
import gc
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from app.ui import gcguard
from app.ui.main import run_gui

app = QApplication([])  # held until interpreter shutdown: the harshest order for Qt's teardown

def ready(window):
    def check():
        views = list(window.controller.jobs.values())
        if views and all(v.final for v in views) and window.training.loss_chart.points("loss"):
            print("history", len(window.training.loss_chart.points("loss")), flush=True)
            print("gc on the GUI thread only", gcguard.installed() and not gc.isenabled(), flush=True)
            QApplication.instance().quit()
        else:
            QTimer.singleShot(50, check)
    check()

raise SystemExit(run_gui(ready))
"""


def test_gui_process_exits_cleanly_after_replaying_a_job(manager, chat_file, tiny_model, ns_home):
    job = manager.submit(chat_file, model=str(tiny_model), hyper=fast_hyper(max_steps=60))
    assert manager.wait(job.id, timeout=300).state == "completed"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "NIGHTSCHOOL_HOME": str(ns_home)}
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "history 60" in out.stdout
    assert "gc on the GUI thread only True" in out.stdout


def test_the_refcount_guard_outlasts_pyside_lost_references(qapp):
    """PySide6 6.12 on Python 3.11 drops a reference to None/True per emit of these signals (a shiboken bug); with
    the guard, 20 000 emissions leave the singletons far from zero instead of aborting the interpreter."""
    import sys

    from PySide6.QtCore import QObject, Signal

    from app.ui import refguard

    class Emitter(QObject):
        fired = Signal(object)
        flag = Signal(bool, int)

    e = Emitter()
    seen = []
    e.fired.connect(lambda value: seen.append(value is None))
    e.flag.connect(lambda b, i: None)
    for _ in range(20_000):
        e.fired.emit(None)
        e.flag.emit(True, 1)
    refguard.top_up()
    assert len(seen) == 20_000 and all(seen)
    if sys.version_info < (3, 12):
        assert sys.getrefcount(None) > refguard.LOW and sys.getrefcount(True) > refguard.LOW


def test_qt_objects_in_cycles_are_destroyed_on_the_gui_thread_only(qtbot):
    """With gcguard (installed for every GUI test, as the app installs it), Qt objects in reference cycles are left
    alone by worker threads that allocate enough to make collections due, and die on the GUI thread's next timer
    tick. Without it the first worker's collection would destroy them on its own thread (a segfault with widgets)."""
    import gc
    import threading

    from PySide6.QtCore import QObject, QTimer

    from app.ui import gcguard

    assert gcguard.installed() and not gc.isenabled()
    gc.collect()
    died: list[str] = []

    class InACycle(QObject):
        def __init__(self) -> None:
            super().__init__()
            self.me = self  # only the cycle collector can free it
            self.timer = QTimer(self)  # as the tabs' controllers hold
            self.timer.start(60_000)

        def __del__(self) -> None:
            died.append(threading.current_thread().name)

    for _ in range(20):
        InACycle()

    kept: list = []

    def allocate() -> None:  # 100 000 containers kept: with automatic collection on, all three generations fall due
        kept.append([[] for _ in range(100_000)])

    workers = [threading.Thread(target=allocate, name=f"worker-{n}") for n in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert died == []
    qtbot.waitUntil(lambda: len(died) == 20, timeout=5_000)
    kept.clear()
    assert set(died) == {threading.main_thread().name}
