"""`nightschool gui` paints its window first, then loads the rest: the bare main window (its tabs by name, "Starting…")
is shown and painted before the heavy imports (the store and Alembic, pyqtgraph, the panels, the runtime), which are
then made module by module with the window repainting between them; `build_window` builds into that same window."""
from __future__ import annotations

import importlib
import sys

from PySide6.QtCore import QEvent, QEventLoop, QObject, QTimer, Signal
from PySide6.QtWidgets import QApplication

from app.ui.main_window import MainWindow
from app.ui.tabs import TABS
from app.ui.theme import apply_dark

# What app.ui.main needs, roughly leaves first (the tabs' panels in their order): each is a pause of 0.1-1 s on a slow
# machine, so the window repaints (and takes a move or a resize) between them rather than once after seconds.
HEAVY = ("sqlalchemy", "alembic", "app.core.base.store", "app.core.runtime.supervisor", "pyqtgraph",
         *(tab.panel.partition(":")[0] for tab in TABS), "qasync", "app.ui.main")
PAINT_WAIT_MS = 2000  # a platform that never paints an unmapped window: go on loading after this

_shell: MainWindow | None = None


class FirstPaint(QObject):
    """`painted` once the window's first paint event has been handled."""

    painted = Signal()

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        window.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:
        if watched is self.window and event.type() == QEvent.Type.Paint:
            self.window.removeEventFilter(self)
            QTimer.singleShot(0, self.painted.emit)  # after this paint reached the screen
        return False


def paint_first() -> MainWindow:
    """Show the bare main window, wait for its first paint, then import what the rest needs; the window is kept for
    `build_window` (`take_shell`). Closed by the person meanwhile: the app ends here."""
    global _shell
    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("Nightschool")
    app.setDesktopFileName("nightschool")  # Wayland's app id, before the window maps
    apply_dark(app)
    window = _shell = MainWindow()
    wait = QEventLoop()
    FirstPaint(window).painted.connect(wait.quit)
    QTimer.singleShot(PAINT_WAIT_MS, wait.quit)
    window.show()
    wait.exec()
    for name in HEAVY:
        importlib.import_module(name)
        app.processEvents()
    if not window.isVisible():
        raise SystemExit(0)
    return window


def take_shell() -> MainWindow | None:
    """The window paint_first showed, once (None when there was none: tests, a benchmark's own window)."""
    global _shell
    window, _shell = _shell, None
    return window
