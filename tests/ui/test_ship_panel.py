"""GUI (offscreen): the Ship tab — verdict marks, the Deploy gate, export stages, deploy / roll back, chat, cancel.

STAND-INS: the real export / deploy / rollback engine runs and the real model server are tested in tests/core/ship. Here the
core's `exports.export`, `deploy.deploy`, `deploy.rollback` and `server.start` / `stop` / `chat` are replaced
(monkeypatch) by small stand-ins (class StandIns) that emit real `P.Progress` / `P.Log` envelopes into the sink, record
real ExportRow / Deployment rows in the test's store and write the server's real state file (with this process's pid),
so what the controller reads (`server.state`, the history, the verdicts) goes through the real code. Checkpoints and
verdicts are rows recorded directly, as in test_judge_panel.py."""
from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from app.core.ship import exports, serving as server
from app.core.ship.config import STAGE_CONVERT, STAGE_LORA, STAGE_MERGE, STAGE_QUANTIZE, STAGE_SMOKE
from app.core.ship.errors import ShipError
from tests.ui.ship_stand_ins import REASON, WAIT_MS, StandIns, checkpoints, record_verdict


@pytest.fixture
def stand_ins(monkeypatch) -> StandIns:
    return StandIns(monkeypatch)


@pytest.fixture
def setup(store, manager, chat_file, tiny_model):
    """Three checkpoints of the tiny model: one passed the gate, one failed, one not judged."""
    model = str(tiny_model)
    passing, failing, unjudged = checkpoints(store, manager, chat_file, model)
    record_verdict(store, passing, model, "pass", ["every metric held or improved"])
    record_verdict(store, failing, model, "fail", [REASON])
    return {"model": model, "pass": f"#{passing}", "fail": f"#{failing}", "none": f"#{unjudged}",
            "base": f"base:{model}", "stem": f"model-ck{passing}"}


@pytest.fixture
def make_panel(qtbot, store):
    from app.ui.ship.controller import ShipController
    from app.ui.ship.panel import ShipPanel

    made = []

    def make(count: int):
        panel = ShipPanel(ShipController(store))
        qtbot.addWidget(panel)
        panel.resize(1280, 820)
        panel.show()
        qtbot.waitUntil(lambda: panel.models.count() == count, timeout=WAIT_MS)  # the list is read on a thread
        made.append(panel)
        return panel

    yield make
    for panel in made:
        panel.controller.stop()


def select(panel, ref: str) -> None:
    rows = [n for n in range(panel.models.count()) if panel.models.item(n).data(Qt.ItemDataRole.UserRole) == ref]
    panel.models.setCurrentRow(rows[0])


def click(qtbot, button) -> None:
    assert button.isEnabled(), button.text()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def idle(panel) -> bool:
    return not panel.controller.busy


def test_marks_and_the_deploy_gate(qtbot, setup, make_panel):
    panel = make_panel(4)
    texts = {panel.models.item(n).data(Qt.ItemDataRole.UserRole): panel.models.item(n).text()
             for n in range(panel.models.count())}
    assert texts[setup["base"]] == "◆  base (model)"
    assert texts[setup["pass"]].startswith(f"✓  {setup['pass']} ") and texts[setup["pass"]].endswith("step 10")
    assert texts[setup["fail"]].startswith("✗  ") and texts[setup["none"]].startswith("–  ")

    select(panel, setup["fail"])
    assert not panel.deploy_button.isEnabled() and panel.export_button.isEnabled()
    tip = panel.deploy_button.toolTip()
    assert "did not pass the quality gate (fail)" in tip and REASON in tip and "can still be exported" in tip
    assert REASON in panel.deploy_note.text()
    select(panel, setup["none"])
    assert not panel.deploy_button.isEnabled() and "has not been judged" in panel.deploy_button.toolTip()
    select(panel, setup["pass"])
    assert panel.deploy_button.isEnabled() and "Gate → export → smoke test" in panel.deploy_button.toolTip()
    assert panel.deploy_note.text() == ""
    select(panel, setup["base"])
    assert panel.deploy_button.isEnabled()
    assert panel.quant.currentText() == "q4_k_m" and "4-bit" in panel.quant.toolTip()


def test_export_fills_the_stages_and_shows_the_smoke_results(qtbot, setup, make_panel, stand_ins):
    panel = make_panel(4)
    select(panel, setup["pass"])
    click(qtbot, panel.export_button)
    qtbot.waitUntil(lambda: idle(panel) and "Export #" in panel.served.smoke.text(), timeout=WAIT_MS)
    assert stand_ins.calls == [("export", setup["pass"], ["q4_k_m"])]
    totals = {STAGE_MERGE: 3, STAGE_CONVERT: 1, STAGE_QUANTIZE: 1, STAGE_LORA: 1, STAGE_SMOKE: 1}
    for stage, bar in panel.stages.bars.items():
        assert bar.maximum() == totals[stage] and bar.value() == bar.maximum(), stage
        assert panel.stages.etas[stage].text().startswith("done in"), stage
    assert panel.stages.title.text().endswith("— done")
    smoke = panel.served.smoke.text()
    entry = exports.history(panel.controller.store)[0].files[0]
    assert f"{setup['stem']}.q4_k_m.gguf" in smoke and "1.9 MiB" in smoke and entry["sha256"][:12] in smoke
    assert "loads in 0.42 s" in smoke and "85.3 tok/s" in smoke and "answers and stops" in smoke
    assert "&quot;Bash&quot;" in smoke or '"Bash"' in smoke  # the answer, escaped
    assert "Exported" in panel.banner.text()

    # the base model in 8-bit: no LoRA stage ("not needed")
    select(panel, setup["base"])
    panel.quant.setCurrentIndex(panel.quant.findText("q8_0"))
    assert "8-bit" in panel.quant.toolTip()
    click(qtbot, panel.export_button)
    qtbot.waitUntil(lambda: idle(panel) and "model-base.q8_0.gguf" in panel.served.smoke.text(), timeout=WAIT_MS)
    assert panel.stages.etas["lora"].text() == "not needed" and panel.stages.bars["lora"].value() == 0
    assert panel.stages.bars["smoke test"].value() == panel.stages.bars["smoke test"].maximum()


def test_a_refused_deploy_shows_what_why_and_fix(qtbot, setup, make_panel, stand_ins):
    stand_ins.refusal = ShipError("model-ck1.q4_k_m.gguf failed its smoke test",
                                  why="the answer did not end its turn within 96 tokens",
                                  fix="it can be exported and inspected, but not deployed")
    panel = make_panel(4)
    select(panel, setup["pass"])
    click(qtbot, panel.deploy_button)
    qtbot.waitUntil(lambda: idle(panel) and panel.banner.isVisible(), timeout=WAIT_MS)
    text = panel.banner.text()
    assert text.startswith(f"Not deployed ({panel.controller.choice(setup['pass']).label}) — ")
    assert str(stand_ins.refusal) in text and "did not end its turn" in text and "not deployed." in text
    assert panel.stages.title.text().endswith("— stopped")
    assert panel.history.rowCount() == 0 and "Stopped" in panel.served.status.text()


def test_deploy_roll_back_stop_start_and_chat(qtbot, setup, make_panel, stand_ins):
    panel = make_panel(4)
    assert "Nothing deployed yet" in panel.served.status.text()
    assert not panel.send_button.isEnabled() and not panel.served.rollback_button.isEnabled()
    first = f"{setup['stem']}.q4_k_m"

    select(panel, setup["pass"])
    click(qtbot, panel.deploy_button)
    qtbot.waitUntil(lambda: idle(panel) and panel.history.rowCount() == 1, timeout=WAIT_MS)
    status = panel.served.status.text()
    assert "Running" in status and "http://127.0.0.1:8765/v1" in status
    assert first in status and "q4_k_m" in status and "loaded in 0.42 s" in status
    assert panel.history.item(0, 1).text() == "deploy" and panel.history.item(0, 3).text() == "q4_k_m"
    assert f"{first}.gguf" in panel.history.item(0, 2).text() and "deployed #" in panel.history.item(0, 4).text()
    assert "Deployed #" in panel.banner.text() and "served at http://127.0.0.1:8765/v1" in panel.banner.text()

    # the base model replaces it: the first stays loaded for an instant rollback
    select(panel, setup["base"])
    click(qtbot, panel.deploy_button)
    qtbot.waitUntil(lambda: idle(panel) and panel.history.rowCount() == 2, timeout=WAIT_MS)
    status = panel.served.status.text()
    assert "Serving <b>model-base.q4_k_m</b>" in status and f"instant rollback: <b>{first}</b>" in status

    click(qtbot, panel.served.rollback_button)
    qtbot.waitUntil(lambda: idle(panel) and panel.history.rowCount() == 3, timeout=WAIT_MS)
    assert ("rollback",) in stand_ins.calls and panel.history.item(0, 1).text() == "rollback"
    assert f"Serving <b>{first}</b>" in panel.served.status.text()
    assert "Rolled back to #" in panel.banner.text()

    # the API key, copied
    assert panel.served.key.text() == server.api_key() and panel.served.key.isReadOnly()
    click(qtbot, panel.served.copy_button)
    assert QGuiApplication.clipboard().text() == server.api_key()

    # chat: the stand-in's answer in the transcript; the conversation goes with the next question
    qtbot.keyClicks(panel.chat_edit, "What does add() return?")
    click(qtbot, panel.send_button)
    qtbot.waitUntil(lambda: "stand-in answer to What does add() return?" in panel.transcript.toPlainText(),
                    timeout=WAIT_MS)
    qtbot.keyClicks(panel.chat_edit, "And sub()?")
    click(qtbot, panel.send_button)
    qtbot.waitUntil(lambda: len(stand_ins.asked) == 2 and not panel.controller.chatting, timeout=WAIT_MS)
    assert [m["role"] for m in stand_ins.asked[1]] == ["user", "assistant", "user"]

    # stop, then start the server again with the current deployment (and the one it replaced on standby)
    click(qtbot, panel.served.stop_button)
    qtbot.waitUntil(lambda: idle(panel) and "Stopped" in panel.served.status.text(), timeout=WAIT_MS)
    assert not panel.send_button.isEnabled() and "rolled back to #" in panel.served.status.text()
    click(qtbot, panel.served.start_button)
    qtbot.waitUntil(lambda: idle(panel) and "Running" in panel.served.status.text(), timeout=WAIT_MS)
    assert stand_ins.calls[-1] == ("start", first)


def test_cancel_sets_the_running_exports_event(qtbot, setup, make_panel, stand_ins):
    stand_ins.block = True
    panel = make_panel(4)
    select(panel, setup["pass"])
    click(qtbot, panel.export_button)
    qtbot.waitUntil(lambda: len(stand_ins.cancels) == 1, timeout=WAIT_MS)
    assert not panel.export_button.isEnabled() and not stand_ins.cancels[0].is_set()
    click(qtbot, panel.stages.cancel_button)
    qtbot.waitUntil(lambda: idle(panel) and panel.banner.isVisible(), timeout=WAIT_MS)
    assert stand_ins.cancels[0].is_set()
    assert "was cancelled" in panel.banner.text() and "Nothing was kept" in panel.banner.text()
    assert not panel.stages.cancel_button.isEnabled() and panel.export_button.isEnabled()


def test_ollama_without_ollama_and_lm_studio(qtbot, setup, make_panel, stand_ins, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no `ollama` to find
    monkeypatch.setenv("LMSTUDIO_MODELS", str(tmp_path / "lmstudio"))
    panel = make_panel(4)
    asked = []
    monkeypatch.setattr(panel, "ask_name", lambda title, label, default: asked.append(default) or default)
    select(panel, setup["pass"])
    click(qtbot, panel.ollama_button)
    qtbot.waitUntil(lambda: idle(panel) and panel.banner.isVisible(), timeout=WAIT_MS)
    name = f"{setup['stem']}:q4_k_m"
    folder = exports.history(panel.controller.store)[0].folder
    modelfile = folder / "Modelfile"
    text = panel.banner.text()
    assert asked == [name] and modelfile.is_file()
    assert f"FROM ./{setup['stem']}.q4_k_m.gguf" in modelfile.read_text(encoding="utf-8")
    assert "Ollama is not installed or not on PATH" in text and "Install Ollama from https://ollama.com" in text
    assert f"ollama create {name} -f {modelfile}" in text

    click(qtbot, panel.lmstudio_button)  # the same export is reused: no stage runs again
    qtbot.waitUntil(lambda: idle(panel) and "LM Studio" in panel.banner.text(), timeout=WAIT_MS)
    placed = tmp_path / "lmstudio" / "nightschool" / f"{setup['stem']}-GGUF" / f"{setup['stem']}-Q4_K_M.gguf"
    assert placed.is_file() and str(placed) in panel.banner.text()
    assert asked[-1] == setup["stem"]
    assert panel.stages.etas["merge"].text() == "reused: already exported"


def test_the_main_window_has_a_ship_tab_after_judge(qtbot, make_window):
    window = make_window()
    index = window.tabs.indexOf(window.ship)
    assert window.tabs.tabText(index) == "Ship" and window.tabs.tabText(index - 1) == "Judge"
    window.tabs.setCurrentWidget(window.ship)
    qtbot.waitUntil(lambda: window.ship.models.count() == 1, timeout=WAIT_MS)  # the base model alone
    assert window.ship.models.item(0).text() == "◆  base (default)"
    assert "Nothing deployed yet" in window.ship.served.status.text()


def test_resume_serving_restarts_the_server_the_user_left_on(qtbot, store, setup, make_panel, stand_ins):
    stand_ins.deploy(store, setup["pass"], sink=lambda env: None)
    stand_ins.stop()  # the app (and with it the server) went away; desired.json still says running
    (server.serve_dir() / "desired.json").write_text(json.dumps({"running": True}), encoding="utf-8")
    panel = make_panel(4)
    assert "Stopped" in panel.served.status.text()
    panel.controller.resume_serving()
    qtbot.waitUntil(lambda: idle(panel) and "Running" in panel.served.status.text(), timeout=WAIT_MS)
    assert stand_ins.calls[-1] == ("start", f"{setup['stem']}.q4_k_m")
    assert "Restarted the model server you left on" in panel.banner.text()
