"""GUI (offscreen): the first-run wizard lists the agents' folders found with their session counts, saves every
choice to the settings the app reads (school policy, capture.json), Skip records only `skipped`, it is offered once,
and its engine page drives the engine's setup (a stand-in for app.core.enginenv: its real set-up runs in tests/packaging/test_bundle.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import QTime
from PySide6.QtWidgets import QDialog, QWizard
from sqlalchemy import select

from app.core.base import first_run
from app.core.base.errors import Explained
from app.core.base.schema import Setting
from app.core.capture.sources import CaptureConfig
from app.core.enginenv.errors import EngineSetupError, SetupCancelled
from app.core.enginenv.setup import EngineStatus, SetupProgress
from app.core.runtime.school import policy
from app.core.train.modelref import check_model_ref
from app.ui.first_run.wizard import FirstRunWizard, offer
from tests.core.capture.helpers import KV, SIMONW

TIMEOUT_MS = 10_000
MB = 1_000_000
REPO = Path(__file__).resolve().parents[2]
APP = """
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from app.ui.first_run.wizard import FirstRunWizard
from app.ui.main import run_gui

app = QApplication([])

def ready(window):
    shown = [w for w in window.findChildren(FirstRunWizard) if w.isVisible()]
    print("wizards shown:", len(shown), flush=True)
    for wizard in shown:
        wizard.skip()
    QTimer.singleShot(0, QApplication.quit)

raise SystemExit(run_gui(ready))
"""


# --- a stand-in for app.core.enginenv.setup (its real set-up takes minutes: tests/packaging/test_bundle.py) ------
class StandInEngine:
    """status() reports `state`; run() reports two stages, then raises `fail`, or waits for the stop event (Cancel)
    and raises SetupCancelled's stand-in, leaving the engine partly installed."""

    def __init__(self, state: str = "missing", fail: Explained | None = None) -> None:
        self.state, self.fail = state, fail
        self.runs: list[bool] = []  # repair flag of each run
        self.stopped = False

    def status(self, check: bool = False) -> EngineStatus:
        return EngineStatus(self.state, None, f"stand-in engine: {self.state}")

    def run(self, on_progress=None, stop: threading.Event | None = None, repair: bool = False) -> EngineStatus:
        self.runs.append(repair)
        on_progress(SetupProgress("venv", "creating the environment", 1, 6, 0, None, None))
        on_progress(SetupProgress("torch", "installing torch", 2, 6, 120 * MB, 850 * MB, 200.0))
        if self.fail:
            raise self.fail
        self.stopped = stop.wait(TIMEOUT_MS / 1000)  # until the test presses Cancel
        self.state = "partial"
        raise SetupCancelled("Set-up stopped", why="what was installed stays", fix="set up again to go on")


# --- fixtures -------------------------------------------------------------------------------------------------
@pytest.fixture
def make_wizard(qtbot, store):
    made = []

    def make(engine=None, **kwargs) -> FirstRunWizard:
        wizard = FirstRunWizard(store, engine=engine or StandInEngine("ready"), **kwargs)
        qtbot.addWidget(wizard)
        wizard.show()
        made.append(wizard)
        return wizard

    yield make
    for wizard in made:  # closed without Skip's bookkeeping: the store closes after this
        wizard.work.close()
        QDialog.done(wizard, 0)


def plant_agents(config: CaptureConfig) -> None:
    """Two Claude Code sessions (one with a sub-agent file, which is part of it) and one Codex rollout, from the
    real-world fixtures; Gemini's folder does not exist."""
    claude = Path(config.roots["claude-code"][0]) / "-home-me-proj"
    claude.mkdir(parents=True)
    shutil.copy(SIMONW / "sample_session.jsonl", claude / "11111111-0000-0000-0000-000000000001.jsonl")
    shutil.copy(KV / "v1" / "claude_golden.jsonl", claude / "11111111-0000-0000-0000-000000000002.jsonl")
    sub = claude / "11111111-0000-0000-0000-000000000001" / "subagents"
    sub.mkdir(parents=True)
    shutil.copy(KV / "v1" / "claude_golden.jsonl", sub / "agent-a1b2c3.jsonl")
    codex = Path(config.roots["codex"][0]) / "2025" / "06" / "01"
    codex.mkdir(parents=True)
    shutil.copy(KV / "v1" / "codex_golden.jsonl", codex / "rollout-2025-06-01T10-00-00-abc.jsonl")


def go_to(qtbot, wizard: FirstRunWizard, page) -> None:
    while wizard.currentPage() is not page:
        wizard.next()
    qtbot.waitUntil(lambda: wizard.currentPage() is page, timeout=TIMEOUT_MS)


def setting_keys(store) -> set[str]:
    with store.session() as s:
        return set(s.scalars(select(Setting.key)))


# --- tests ----------------------------------------------------------------------------------------------------
def test_agents_page_counts_sessions_per_agent_and_says_not_found(qtbot, make_wizard, capture_config, tmp_path):
    config = CaptureConfig(roots={**capture_config.roots, "gemini": [str(tmp_path / "no-gemini" / "tmp")]})
    plant_agents(config)
    wizard = make_wizard(capture=config)
    page = wizard.agents
    qtbot.waitUntil(lambda: len(page.rows) == 3, timeout=TIMEOUT_MS)
    words = {agent: (status.text(), folders.text()) for agent, (status, folders) in page.rows.items()}
    assert words["claude-code"] == ("2 sessions", config.roots["claude-code"][0])
    assert words["codex"] == ("1 session", config.roots["codex"][0])
    assert words["gemini"] == ("not found", f"Looked in {tmp_path / 'no-gemini' / 'tmp'}")
    assert page.summary.text() == "3 sessions to learn from."


def test_finish_saves_every_choice_where_the_app_reads_it(qtbot, make_wizard, store, ns_home, tmp_path):
    wizard = make_wizard()  # capture settings: the data dir's capture.json, as the app loads them
    go_to(qtbot, wizard, wizard.model)
    folder = tmp_path / "my-model"
    folder.mkdir()
    wizard.model.folder.setChecked(True)
    wizard.model.folder_edit.setText(str(folder))
    wizard.next()  # refused: no config.json
    assert wizard.currentPage() is wizard.model
    assert "no config.json" in wizard.model.error.text()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (folder / name).write_text("{}")
    wizard.next()
    assert wizard.currentPage() is wizard.exclude
    for project in ("client-*", "~/private/*", "scratch"):
        wizard.exclude.edit.setText(project)
        wizard.exclude.add()
    wizard.exclude.list.item(2).setSelected(True)
    wizard.exclude.remove()
    wizard.next()
    page = wizard.policy
    page.sessions.setValue(20)
    page.windowed.setChecked(True)
    page.start.setTime(QTime(1, 0))
    page.end.setTime(QTime(5, 30))
    page.deploy.setCurrentIndex(page.deploy.findData("ask"))
    go_to(qtbot, wizard, wizard.engine)
    wizard.button(QWizard.WizardButton.FinishButton).click()

    assert wizard.outcome == "done" and not wizard.isVisible()
    saved = policy.load(store)
    assert saved.base_model == str(folder.resolve())
    assert (saved.min_sessions, saved.window, saved.deploy) == (20, "01:00-05:30", "ask")
    assert check_model_ref(saved.base_model) == "folder"
    assert CaptureConfig.load().exclude == ["client-*", "~/private/*"]
    state = first_run.load(store)
    assert state.done and not state.skipped and state.at
    assert not first_run.pending(store)


def test_the_model_page_offers_the_students_this_machine_can_train(qtbot, make_wizard):
    wizard = make_wizard()
    page = wizard.model
    qtbot.waitUntil(lambda: "This machine:" in page.fit_note.text(), timeout=10_000)  # read off the GUI thread
    offered = [page.suggested.itemData(i) for i in range(1, page.suggested.count())]
    assert "HuggingFaceTB/SmolLM2-360M-Instruct" in offered  # this CI machine: 2+ cores, no GPU, RAM for 360M
    assert "Qwen/Qwen2.5-7B-Instruct" not in offered and "need a GPU" in page.fit_note.text()
    assert "measure" in page.fit_note.text()  # nothing trained here yet: no time is made up
    page.suggested.setCurrentIndex(offered.index("HuggingFaceTB/SmolLM2-360M-Instruct") + 1)
    page.suggested.activated.emit(page.suggested.currentIndex())
    assert page.hub.isChecked() and page.choice() == "HuggingFaceTB/SmolLM2-360M-Instruct"


def test_invalid_window_and_hub_id_are_refused_on_their_page(qtbot, make_wizard):
    wizard = make_wizard()
    go_to(qtbot, wizard, wizard.model)
    wizard.model.hub.setChecked(True)
    wizard.model.hub_edit.setText("not a hub id")
    wizard.next()
    assert wizard.currentPage() is wizard.model and "is not a hub id" in wizard.model.error.text()
    wizard.model.hub_edit.setText("HuggingFaceTB/SmolLM2-360M-Instruct")
    go_to(qtbot, wizard, wizard.policy)
    wizard.policy.windowed.setChecked(True)
    wizard.policy.end.setTime(wizard.policy.start.time())
    wizard.next()
    assert wizard.currentPage() is wizard.policy and "same time" in wizard.policy.error.text()


def test_skip_records_only_skipped_and_the_wizard_is_not_offered_again(qtbot, make_wizard, store, ns_home):
    capture_file = ns_home / "capture.json"
    before = capture_file.read_bytes()
    wizard = make_wizard()
    go_to(qtbot, wizard, wizard.exclude)
    wizard.exclude.edit.setText("client-*")
    wizard.exclude.add()
    wizard.next()
    wizard.policy.sessions.setValue(3)
    wizard.button(QWizard.WizardButton.CustomButton1).click()  # Skip

    assert wizard.outcome == "skipped" and not wizard.isVisible()
    assert wizard.result() == QDialog.DialogCode.Rejected
    assert setting_keys(store) == {first_run.KEY}
    state = first_run.load(store)
    assert state.skipped and not state.done
    assert policy.load(store) == policy.Policy()
    assert capture_file.read_bytes() == before
    assert offer(None, store, enabled=True) is None


def test_offered_over_the_window_once_and_not_in_tests_by_default(qtbot, make_window, store):
    window = make_window()
    assert offer(window, store) is None  # tests/conftest.py sets NIGHTSCHOOL_NO_FIRST_RUN=1
    wizard = offer(window, store, enabled=True, engine=StandInEngine("external"))
    assert wizard is not None and wizard.parent() is window
    qtbot.waitUntil(wizard.isVisible, timeout=TIMEOUT_MS)
    go_to(qtbot, wizard, wizard.exclude)
    wizard.exclude.edit.setText("secret-project")
    wizard.exclude.add()
    go_to(qtbot, wizard, wizard.engine)
    wizard.button(QWizard.WizardButton.FinishButton).click()
    assert wizard.outcome == "done"
    assert window.capture_controller.config.exclude == ["secret-project"]  # the running capture follows at once
    assert CaptureConfig.load().exclude == ["secret-project"]
    assert offer(window, store, enabled=True) is None


def test_engine_page_shows_progress_and_cancel_stops_the_setup(qtbot, make_wizard):
    engine = StandInEngine("missing")
    wizard = make_wizard(engine=engine)
    page = wizard.engine
    go_to(qtbot, wizard, page)
    qtbot.waitUntil(lambda: not page.setup_button.isHidden(), timeout=TIMEOUT_MS)
    assert page.state.text() == "The training engine is not installed yet."
    page.setup_button.click()
    qtbot.waitUntil(lambda: page.stage.text() == "2 of 6 · installing torch", timeout=TIMEOUT_MS)
    assert page.size.text() == "120 of 850 MB · about 3 min left"
    assert 0 < page.bar.value() < 1000 and not page.bar.isHidden()
    assert not wizard.button(QWizard.WizardButton.FinishButton).isEnabled()  # wait or cancel first
    page.cancel_button.click()
    qtbot.waitUntil(lambda: page.state.text() == "The training engine is partly installed.", timeout=TIMEOUT_MS)
    assert engine.stopped and engine.runs == [False]
    assert "Set-up stopped" in page.error.text() and "set up again to go on" in page.error.text()
    assert page.bar.isHidden() and page.setup_button.text() == "Set up now"
    assert wizard.button(QWizard.WizardButton.FinishButton).isEnabled()


def test_engine_page_shows_a_failed_setup_as_what_why_fix(qtbot, make_wizard):
    error = EngineSetupError("Could not download torch", why="the package index did not answer",
                              fix="check the network, then try again")
    engine = StandInEngine("broken", fail=error)
    wizard = make_wizard(engine=engine)
    page = wizard.engine
    go_to(qtbot, wizard, page)
    qtbot.waitUntil(lambda: page.setup_button.text() == "Repair" and not page.setup_button.isHidden(),
                    timeout=TIMEOUT_MS)
    page.setup_button.click()
    qtbot.waitUntil(lambda: "Could not download torch" in page.error.text(), timeout=TIMEOUT_MS)
    assert "Why: the package index did not answer" in page.error.text()
    assert "What to do: check the network, then try again" in page.error.text()
    assert engine.runs == [True]  # a damaged engine is repaired
    qtbot.waitUntil(lambda: not page.setup_button.isHidden(), timeout=TIMEOUT_MS)  # the state read again
    assert page.setup_button.text() == "Repair" and "Could not download torch" in page.error.text()
    assert wizard.button(QWizard.WizardButton.FinishButton).isEnabled()


def test_engine_page_says_an_external_engine_needs_nothing(qtbot, make_wizard):
    wizard = make_wizard(engine=StandInEngine("external"))
    page = wizard.engine
    go_to(qtbot, wizard, page)
    qtbot.waitUntil(lambda: page.state.text().startswith("Nothing to set up"), timeout=TIMEOUT_MS)
    assert page.setup_button.isHidden()


def test_the_app_shows_the_wizard_on_its_first_start_only(ns_home):
    env = {k: v for k, v in os.environ.items() if k != "NIGHTSCHOOL_NO_FIRST_RUN"}
    env.update(QT_QPA_PLATFORM="offscreen", NIGHTSCHOOL_HOME=str(ns_home))
    starts = [subprocess.run([sys.executable, "-c", APP], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=120, check=False) for _ in range(2)]
    assert [s.returncode for s in starts] == [0, 0], starts[-1].stderr[-2000:]
    assert [s.stdout.strip() for s in starts] == ["wizards shown: 1", "wizards shown: 0"]


def test_engine_page_reads_the_real_engine_status_of_a_developer_checkout(qtbot, make_wizard, monkeypatch):
    monkeypatch.delenv("NIGHTSCHOOL_ENGINE_PYTHON", raising=False)
    wizard = make_wizard(engine="real")  # app.core.enginenv.setup: this checkout's Python has the engine
    page = wizard.engine
    go_to(qtbot, wizard, page)
    qtbot.waitUntil(lambda: page.state.text().startswith("Nothing to set up"), timeout=TIMEOUT_MS)
    assert page.setup_button.isHidden() and page.footnote.isHidden()
    assert page.python.text() == f"Python: {sys.executable}"
