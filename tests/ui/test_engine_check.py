"""At start the packaged app probes its engine: a broken one opens the engine page with Repair (which runs a repair),
a ready one opens nothing, and nothing is probed while the first-run wizard is due (its own page covers it)."""
from __future__ import annotations

from PySide6.QtWidgets import QMainWindow

from app.core.base import first_run
from app.ui.engine_check import EngineWizard, offer
from tests.ui.test_first_run import TIMEOUT_MS, StandInEngine


class Probed(StandInEngine):
    """The stand-in engine (the real probe needs a built environment: tests/packaging/test_bundle.py), recording
    whether the start-up check asked for the import probe."""

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.checked: list[bool] = []

    def status(self, check: bool = False):
        self.checked.append(check)
        return super().status(check)


def window(qtbot) -> QMainWindow:
    win = QMainWindow()
    win.engine_wizard = None
    qtbot.addWidget(win)
    win.show()
    return win


def test_a_broken_engine_opens_its_page_with_repair(qtbot, store):
    first_run.mark(store)
    win, engine = window(qtbot), Probed("broken")
    work = offer(win, store, engine=engine, when=True)
    qtbot.waitUntil(lambda: win.engine_wizard is not None and win.engine_wizard.isVisible(), timeout=TIMEOUT_MS)
    assert engine.checked == [True]  # the import probe ran
    page = win.engine_wizard.page
    assert page.setup_button.text() == "Repair" and "damaged" in page.state.text()
    page.setup_button.click()
    qtbot.waitUntil(lambda: engine.runs == [True], timeout=TIMEOUT_MS)  # a repair, not a plain set-up
    work.cancel()
    qtbot.waitUntil(lambda: not work.busy, timeout=TIMEOUT_MS)
    assert isinstance(win.engine_wizard, EngineWizard)


def test_a_ready_engine_opens_nothing_and_the_first_run_wizard_has_the_page(qtbot, store):
    first_run.mark(store)
    win, engine = window(qtbot), Probed("ready")
    work = offer(win, store, engine=engine, when=True)
    qtbot.waitUntil(lambda: engine.checked == [True], timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: not work.busy, timeout=TIMEOUT_MS)
    assert win.engine_wizard is None
    fresh = type(store)(store.path.with_name("fresh.db"))  # a first start: the wizard is due
    assert offer(window(qtbot), fresh, engine=Probed("broken"), when=True) is None
    assert offer(window(qtbot), store, engine=Probed("broken")) is None  # a checkout: its engine is its own Python
