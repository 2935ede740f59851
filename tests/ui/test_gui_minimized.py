"""GUI: starting in the background. `nightschool gui --minimized` (the login entry of earlier installs) is now the tray
process with `--learn`: the tray icon, and the daemon when nothing runs the school; a window makes no tray icon of its
own while the tray process runs (no double icons), and starts none where no tray host runs."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from app.core.base import paths
from app.core.runtime.machinery import lock
from app.ui.main import start_tray
from tests.core.runtime.daemon_helpers import wait_for

REPO = Path(__file__).resolve().parents[2]


def test_gui_minimized_starts_the_tray_and_learning_in_the_background(ns_home):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "NIGHTSCHOOL_HOME": str(ns_home)}
    tray = subprocess.Popen([sys.executable, "-m", "app.cli.main", "gui", "--minimized"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    holder = None
    try:
        holder = wait_for(lambda: (h := lock.holder()) and h.get("channel") and h, 60,
                          "the daemon started by the tray", alive=lambda: tray.poll() is None)
        assert holder["role"] == "daemon" and holder["pid"] != tray.pid
        assert os.getsid(holder["pid"]) == holder["pid"]  # its own session: it outlives the tray
        wait_for(lambda: lock.SessionLock.held_by(lock.TRAY) == tray.pid, 60, "the tray's session lock",
                 alive=lambda: tray.poll() is None)
    finally:
        tray.terminate()
        tray.wait(timeout=30)
        if holder is not None:
            os.kill(holder["pid"], signal.SIGTERM)
            psutil.Process(holder["pid"]).wait(timeout=30)
    assert "started learning in the background (daemon pid" in tray.stdout.read()


def test_a_window_makes_no_icon_of_its_own_while_the_tray_process_runs():
    assert not start_tray()  # offscreen: no tray host, no tray process: the window keeps its own (banner)
    assert lock.SessionLock.held_by(lock.TRAY) is None and not (paths.data_dir() / "logs" / "tray.out").exists()
    held = lock.SessionLock.take(lock.TRAY)  # as the tray process holds it
    try:
        assert lock.SessionLock.held_by(lock.TRAY) == os.getpid()
        assert start_tray()  # one runs: the window leaves the icon to it
        assert lock.SessionLock.take(lock.TRAY) is None  # one per session
    finally:
        held.release()
    assert lock.SessionLock.held_by(lock.TRAY) is None
