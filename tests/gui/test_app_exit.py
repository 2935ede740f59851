"""The real app process quits cleanly (exit code 0) after showing a job's history — no abort at shutdown."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import fast_hyper

REPO = Path(__file__).resolve().parents[2]
CHILD = """
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from app.ui.main import run_gui

app = QApplication([])  # held until interpreter shutdown: the harshest order for Qt's teardown

def ready(window):
    def check():
        views = list(window.controller.jobs.values())
        if views and all(v.final for v in views) and window.training.loss_chart.points("loss"):
            print("history", len(window.training.loss_chart.points("loss")), flush=True)
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
