"""The first-run wizard: what was found, the base model, projects kept out, when to learn, the training engine; shown
once (finished or skipped, `app.core.base.first_run`), every choice saved to the settings the app's tabs edit."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QWidget, QWizard

from app.core.base import first_run
from app.core.base.errors import Explained
from app.core.base.store import Store
from app.core.capture.sources import CaptureConfig
from app.core.runtime.school import policy
from app.ui.first_run.pages import AgentsPage, ExcludePage, PolicyPage
from app.ui.first_run.training import EnginePage, ModelPage
from app.ui.first_run.work import WizardWork, real_engine

NO_FIRST_RUN = "NIGHTSCHOOL_NO_FIRST_RUN"  # "1": never show the wizard (tests that build the window set it)


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
        self.work.students.connect(self.model.show_students)
        self.work.look_students(store)
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
