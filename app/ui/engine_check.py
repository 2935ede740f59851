"""At start, is the packaged app's training engine whole? Its import probe runs off the GUI thread; a missing,
interrupted, outdated or broken environment opens the engine page on its own (set up or repair, with progress)."""
from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QWizard

from app.core.base import first_run, paths
from app.core.base.store import Store
from app.ui.first_run.training import EnginePage
from app.ui.first_run.work import WizardWork, real_engine

NEEDS_WORK = ("missing", "partial", "outdated", "broken")


class EngineWizard(QWizard):
    """The first-run wizard's engine page alone: the state, Set up / Repair, progress, Cancel, what / why / fix."""

    def __init__(self, work: WizardWork, status: Any, parent=None) -> None:
        super().__init__(parent)
        self.work = work
        self.setWindowTitle("Nightschool — training engine")
        self.setOption(QWizard.WizardOption.NoBackButtonOnStartPage)
        self.setOption(QWizard.WizardOption.NoCancelButton)  # Close says it; Cancel is the set-up's own button
        self.setButtonText(QWizard.WizardButton.FinishButton, "Close")
        self.page = EnginePage(work)
        self.page.asked = True
        self.addPage(self.page)
        self.page.show_status(status)
        self.resize(640, 360)

    def done(self, result: int) -> None:
        self.work.close()
        super().done(result)


def offer(window, store: Store, engine: Any = "real", when: bool | None = None) -> WizardWork | None:
    """Probe the engine in the background and open its page over the window if it needs work. when None: only in
    the packaged app (a checkout's engine is its own Python), and not while the first-run wizard is due (it has the
    page)."""
    engine = real_engine() if engine == "real" else engine
    if engine is None or not (paths.frozen() if when is None else when) or first_run.pending(store):
        return None
    work = WizardWork(engine)

    def checked(status: Any) -> None:
        if status.state in NEEDS_WORK and window.isVisible():
            window.engine_wizard = EngineWizard(work, status, parent=window)
            window.engine_wizard.open()

    work.status.connect(checked)
    work.read_status(check=True)
    return work
