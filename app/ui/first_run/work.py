"""The first-run and engine wizards' work off the GUI thread: the agents' folders, the engine's status and setup."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Signal

from app.core.base.errors import Explained
from app.core.capture.found import agent_folders
from app.core.capture.sources import CaptureConfig
from app.ui.background import BackgroundController


class WizardWork(BackgroundController):
    """The wizard's work off the GUI thread: the agents' folders, the engine's status and its setup (progress, result
    and refusal come back on the GUI thread as signals; nothing comes back after `close`)."""

    found = Signal(object)  # list[AgentFolders]
    look_failed = Signal(object)  # Explained
    status = Signal(object)  # EngineStatus
    progress = Signal(object)  # SetupProgress
    done = Signal(object)  # EngineStatus after a setup
    failed = Signal(object)  # Explained (what / why / fix) from the engine's status or setup
    students = Signal(object)  # School.students(): what this machine can train, a cycle's time measured here

    def __init__(self, engine: Any) -> None:
        super().__init__()
        self.engine = engine
        self.stop: threading.Event | None = None

    def look(self, config: CaptureConfig) -> None:
        self._thread("first-run-look", lambda: agent_folders(config), self.found, self.look_failed,
                     "Could not look at the agents' folders")

    def look_students(self, store) -> None:
        from app.core.runtime.school.facade import School

        self._thread("first-run-students", lambda: School(store).students(), self.students, self.look_failed,
                     "Could not look at what this machine can train")

    def read_status(self, check: bool = False) -> None:
        """The engine's status; check: with the import probe (a few seconds)."""
        read = (lambda: self.engine.status(check=True)) if check else self.engine.status
        self._thread("first-run-engine", read, self.status, self.failed, "Could not check the training engine")

    def setup(self, repair: bool = False) -> None:
        """engine.run on a thread (busy meanwhile); Cancel sets the stop event it watches."""
        if self.busy:
            return
        self.stop = stop = threading.Event()
        self._set_busy(True)

        def run():
            return self.engine.run(on_progress=lambda p: self._post(self.progress.emit, (p,)), stop=stop,
                                   repair=repair)

        self._thread("first-run-setup", run, self.done, self.failed, "The engine setup stopped", setup=True)

    def cancel(self) -> None:
        if self.stop is not None:
            self.stop.set()

    def close(self) -> None:
        self.cancel()
        self._closed = True

    def _thread(self, name: str, call: Callable, signal, failed, words: str, setup: bool = False) -> None:
        def refused(exc: Exception) -> None:  # shown as what / why / fix, the wizard goes on
            if not isinstance(exc, Explained):
                exc = Explained(words, why=f"unexpected {type(exc).__name__}: {exc}",
                                fix="go on without it and try again later")
            self._ended(setup, failed.emit, (exc,))

        self._on_thread(name, call, lambda result: self._ended(setup, signal.emit, (result,)), refused)

    def _ended(self, setup: bool, emit: Callable, args: tuple) -> None:
        if setup:
            self._set_busy(False)
        emit(*args)


def real_engine() -> Any:
    """The training engine's environment module, or None when this build has none."""
    try:
        from app.core.enginenv import setup as envsetup
    except ImportError:
        return None
    return envsetup
