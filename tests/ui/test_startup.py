"""`nightschool gui` paints its window before it loads the rest — the store and Alembic, pyqtgraph, the panels, the
runtime — and then builds the tabs into that same window (an ordering check in the real entry point's process; the
times are bench/bench_gui.py's)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pyqtgraph", "alembic", "app.core.base.store", "app.core.runtime.supervisor", "app.ui.training.panel",
         "app.core.train.spec")
CHILD = f"""
import sys
from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QApplication

app = QApplication([])  # made first only to watch the events: the entry point uses this instance


class Watch(QObject):
    def __init__(self):
        super().__init__()
        self.window = None
        self.poll = QTimer()
        self.poll.timeout.connect(self.loaded)

    def eventFilter(self, watched, event):
        if (self.window is None and event.type() == QEvent.Type.Paint and watched.isWidgetType()
                and watched.isWindow() and watched.windowTitle() == "Nightschool"):
            self.window = watched
            print("painted; loaded by then:", [m for m in {HEAVY!r} if m in sys.modules],
                  "controller:", watched.controller is not None, "runtime:", watched.runtime is not None, flush=True)
            self.poll.start(20)
        return False

    def loaded(self):
        window = next((w for w in app.topLevelWidgets() if w.windowTitle() == "Nightschool" and w.isVisible()), None)
        if window is not None and window.controller is not None:
            self.poll.stop()
            print("loaded: same window", window is self.window, "tabs", window.tabs.count(),
                  "runtime", window.runtime is not None, "heavy", all(m in sys.modules for m in {HEAVY!r}),
                  flush=True)
            app.quit()


watch = Watch()
app.installEventFilter(watch)
from app.cli.main import main

raise SystemExit(main(["gui"]))
"""


def test_the_window_paints_before_the_rest_is_loaded(ns_home):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "NIGHTSCHOOL_HOME": str(ns_home)}
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    painted = next(line for line in lines if line.startswith("painted"))
    assert painted == "painted; loaded by then: [] controller: False runtime: False", painted
    assert "loaded: same window True tabs 9 runtime True heavy True" in lines, out.stdout
    assert lines.index(painted) < lines.index("loaded: same window True tabs 9 runtime True heavy True")
