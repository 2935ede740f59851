"""The first-run wizard: what was found, the base model, projects kept out, when to learn, the training engine; shown
once (finished or skipped, `app.core.base.first_run`), every choice saved to the settings the app's tabs edit."""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QProgressBar, QPushButton, QWidget, QWizard

from app.core.base import first_run
from app.core.base.errors import Explained
from app.core.base.store import Store
from app.core.capture.found import agent_folders
from app.core.capture.sources import CaptureConfig
from app.core.runtime.school import policy
from app.ui.background import BackgroundController
from app.ui.first_run_pages import AgentsPage, ExcludePage, ModelPage, Page, PolicyPage
from app.ui.kit import DIM_STYLE, GOOD_STYLE, WARN_STYLE, label

NO_FIRST_RUN = "NIGHTSCHOOL_NO_FIRST_RUN"  # "1": never show the wizard (tests that build the window set it)


class WizardWork(BackgroundController):
    """The wizard's work off the GUI thread: the agents' folders, the engine's status and its setup (progress, result
    and refusal come back on the GUI thread as signals; nothing comes back after `close`)."""

    found = Signal(object)  # list[AgentFolders]
    look_failed = Signal(object)  # Explained
    status = Signal(object)  # EngineStatus
    progress = Signal(object)  # SetupProgress
    done = Signal(object)  # EngineStatus after a setup
    failed = Signal(object)  # Explained (what / why / fix) from the engine's status or setup

    def __init__(self, engine: Any) -> None:
        super().__init__()
        self.engine = engine
        self.stop: threading.Event | None = None

    def look(self, config: CaptureConfig) -> None:
        self._thread("first-run-look", lambda: agent_folders(config), self.found, self.look_failed,
                     "Could not look at the agents' folders")

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


STATES = {"ready": ("The training engine is ready.", GOOD_STYLE, ""),
          "external": ("Nothing to set up: the training engine is already there.", GOOD_STYLE, ""),
          "missing": ("The training engine is not installed yet.", WARN_STYLE, "Set up now"),
          "partial": ("The training engine is partly installed.", WARN_STYLE, "Set up now"),
          "outdated": ("The training engine is from another version of Nightschool.", WARN_STYLE, "Set up again"),
          "broken": ("The training engine is damaged.", WARN_STYLE, "Repair")}


def sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if not text or text.endswith((".", "!", "?")) else ".")


class EnginePage(Page):
    """The training engine's environment: its state, and a setup with progress, Cancel and what / why / fix."""

    def __init__(self, work: WizardWork) -> None:
        super().__init__("Engine", "Training runs in its own Python environment with PyTorch. It is set up once; the "
                                   "download is large (hundreds of megabytes to a few gigabytes).")
        self.work, self.asked, self.repair = work, False, False
        self.state = label("Checking the training engine…")
        self.detail, self.python = label(), label(style=DIM_STYLE, selectable=True)
        self.setup_button, self.cancel_button = QPushButton("Set up now"), QPushButton("Cancel")
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.stage, self.size = label(), label(style=DIM_STYLE)
        for widget in (self.state, self.detail, self.python):
            self.box.addWidget(widget)
        buttons = QHBoxLayout()
        buttons.addWidget(self.setup_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        self.box.addLayout(buttons)
        for widget in (self.bar, self.stage, self.size):
            self.box.addWidget(widget)
        self.setup_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        work.status.connect(self.show_status)
        work.progress.connect(self.show_progress)
        work.done.connect(self.show_status)
        work.failed.connect(self.show_error)
        work.busy_changed.connect(lambda _busy: self.completeChanged.emit())
        self._running(False)
        for widget in (self.setup_button, self.detail, self.python):
            widget.hide()
        self.finish("You can go on without it and set it up later: the app offers it again at start, "
                    "or `nightschool engine setup`.")

    def initializePage(self) -> None:
        if self.work.engine is None:
            self.state.setText("Engine setup is not part of this build.")
        elif not self.asked:
            self.asked = True
            self.work.read_status()

    def isComplete(self) -> bool:
        return not self.work.busy

    def show_status(self, status: Any) -> None:
        self._running(False)
        words, style, button = STATES.get(status.state, (f"The training engine is {status.state}.", WARN_STYLE,
                                                          "Set up now"))
        self.state.setText(words)
        self.state.setStyleSheet(style)
        self.detail.setText(sentence(status.detail or ""))
        self.detail.setVisible(bool(status.detail))
        self.python.setText(f"Python: {status.python}" if status.python else "")
        self.python.setVisible(bool(status.python))
        self.footnote.setVisible(status.state not in ("ready", "external"))
        self.repair = status.state == "broken"
        self.setup_button.setText(button or "Set up now")
        self.setup_button.setVisible(bool(button))

    def start(self) -> None:
        self.error.clear()
        self.stage.setText("Starting…")
        self.size.clear()
        self.bar.setValue(0)
        self._running(True)
        self.work.setup(repair=self.repair)

    def cancel(self) -> None:
        self.work.cancel()
        self.cancel_button.setEnabled(False)
        self.stage.setText("Stopping…")

    def show_progress(self, p: Any) -> None:
        """A SetupProgress: its words and share (the terminal's `nightschool engine setup` says the same)."""
        stage, size = p.words()
        self.stage.setText(stage)
        self.size.setText(size)
        self.bar.setValue(p.share())

    def show_error(self, error: Explained | str) -> None:
        """A failed (or cancelled) setup or status read: what / why / fix, then the state as it is now."""
        super().show_error(error)
        if not self.work.busy and not self.bar.isHidden():  # a setup ended: what is installed now?
            self._running(False)
            self.work.read_status()

    def _running(self, running: bool) -> None:
        for widget in (self.bar, self.stage, self.size, self.cancel_button):
            widget.setVisible(running)
        self.cancel_button.setEnabled(running)
        self.setup_button.setEnabled(not running)


def real_engine() -> Any:
    """The training engine's environment module, or None when this build has none."""
    try:
        from app.core.enginenv import setup as envsetup
    except ImportError:
        return None
    return envsetup


class FirstRunWizard(QWizard):
    """Five short pages; Skip (every page, or closing) records only `skipped`; Finish saves every choice and `done`."""

    def __init__(self, store: Store, capture: CaptureConfig | None = None, capture_path: Path | None = None,
                 engine: Any = "real", capture_problem: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store, self.capture_path = store, capture_path
        self.capture, self.capture_problem = (capture, capture_problem) if capture is not None else _load_capture()
        self.outcome = ""  # "done" | "skipped" once closed
        self.work = WizardWork(real_engine() if engine == "real" else engine)
        current = policy.load(store)
        self.agents = AgentsPage(lambda: self.work.look(self.capture))
        self.model = ModelPage(current.base_model)
        self.exclude = ExcludePage(self.capture.exclude, self.capture_problem)
        self.policy = PolicyPage(current)
        self.engine = EnginePage(self.work)
        self.work.found.connect(self.agents.show_found)
        self.work.look_failed.connect(self.agents.show_error)
        for page in (self.agents, self.model, self.exclude, self.policy, self.engine):
            self.addPage(page)
        self._buttons()

    def _buttons(self) -> None:
        self.setWindowTitle("Welcome to Nightschool")
        self.setWizardStyle(QWizard.WizardStyle.ClassicStyle)
        self.setOption(QWizard.WizardOption.NoCancelButton)
        self.setOption(QWizard.WizardOption.HaveCustomButton1)
        self.setButtonText(QWizard.WizardButton.CustomButton1, "Skip")
        self.button(QWizard.WizardButton.CustomButton1).setToolTip(
            "Close this guide and keep the defaults; everything can be changed later in the tabs")
        self.setButtonLayout([QWizard.WizardButton.CustomButton1, QWizard.WizardButton.Stretch,
                              QWizard.WizardButton.BackButton, QWizard.WizardButton.NextButton,
                              QWizard.WizardButton.FinishButton])
        self.customButtonClicked.connect(lambda _which: self.skip())
        self.setMinimumSize(720, 560)

    # --- outcomes --------------------------------------------------------------------------------------
    def skip(self) -> None:
        """Keep every default: only `skipped` is recorded; a running engine setup is stopped."""
        self.work.close()
        first_run.mark(self.store, skipped=True)
        self.outcome = "skipped"
        super().reject()

    def reject(self) -> None:  # Escape or the window's close button: the same as Skip
        self.skip()

    def accept(self) -> None:
        problem = self.save()
        if problem:
            self.engine.show_error(Explained("Your choices could not be saved", why=problem,
                                             fix="go back and change them, or Skip and set them later"))
            return
        self.work.close()
        first_run.mark(self.store)
        self.outcome = "done"
        super().accept()

    def save(self) -> str:
        """Every choice into the app's own settings (the school policy, capture.json); a refusal's text, else ""."""
        try:
            for key, value in {"base_model": self.model.choice(), **self.policy.values()}.items():
                policy.set_value(self.store, key, value)
            if not self.capture_problem and self.exclude.projects() != self.capture.exclude:
                self.capture.exclude[:] = self.exclude.projects()  # the window's capture follows it at once
                self.capture.save(self.capture_path)
        except (Explained, OSError) as exc:
            return str(exc)
        return ""


def _load_capture() -> tuple[CaptureConfig, str]:
    try:
        return CaptureConfig.load(), ""
    except ValueError as exc:
        return CaptureConfig(), str(exc)


def wanted(enabled: bool | None = None) -> bool:
    """enabled None: shown unless NIGHTSCHOOL_NO_FIRST_RUN=1."""
    return enabled if enabled is not None else os.environ.get(NO_FIRST_RUN) != "1"


def offer(window, store: Store, enabled: bool | None = None, engine: Any = "real") -> FirstRunWizard | None:
    """Open the wizard over the window (not modal to the app: the event loop runs on) unless it was finished or
    skipped before, or it is turned off; the wizard edits the window's own capture settings."""
    if not wanted(enabled) or not first_run.pending(store):
        return None
    capture = getattr(window, "capture_controller", None)
    wizard = FirstRunWizard(store, capture.config if capture else None, capture.config_path if capture else None,
                            engine=engine, capture_problem=(capture.config_problem or "") if capture else "",
                            parent=window)
    wizard.open()
    return wizard
