"""GUI (offscreen): the Ship tab's "Use it in…" box on a fresh HOME — Connect… shows what will be written where and
writes nothing, Write it writes Codex's config (a backup of the real docs example first) and says the live check's
outcome, Disconnect puts the file back byte for byte. Real widgets, the real core; the served endpoint is the connect
tests' stand-in for the served student (tests/core/ship/connect/standin.py)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from tests.core.ship.connect.standin import StandInStudent

FIXTURE = Path(__file__).resolve().parents[1] / "core/ship/connect/fixtures/codex.config.toml"
WAIT_MS = 15_000


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    user = tmp_path / "user"
    (user / ".codex").mkdir(parents=True)
    shutil.copyfile(FIXTURE, user / ".codex/config.toml")
    monkeypatch.setenv("HOME", str(user))
    for var in ("CODEX_HOME", "XDG_CONFIG_HOME", "CONTINUE_GLOBAL_DIR"):
        monkeypatch.delenv(var, raising=False)
    return user


def click(qtbot, widget) -> None:
    assert widget.isEnabled() and widget.isVisible(), widget.text()
    qtbot.mouseClick(widget, Qt.MouseButton.LeftButton)


def test_connect_codex_from_the_ship_tab_then_disconnect(qtbot, store, home):
    from app.ui.ship.controller import ShipController
    from app.ui.ship.panel import ShipPanel

    student = StandInStudent()
    panel = ShipPanel(ShipController(store))
    qtbot.addWidget(panel)
    try:
        panel.resize(1280, 900)
        panel.show()
        box = panel.use_in
        qtbot.waitUntil(lambda: box.states["codex"].text() == "not connected", timeout=WAIT_MS)
        assert not box.disconnect_buttons["codex"].isEnabled() and not box.write_button.isVisible()
        config = home / ".codex/config.toml"
        original = config.read_bytes()

        click(qtbot, box.connect_buttons["codex"])
        qtbot.waitUntil(lambda: box.write_button.isVisible(), timeout=WAIT_MS)
        shown = box.plan.text()
        assert "~/.codex/config.toml" in shown and "~/.codex/nightschool.config.toml" in shown
        assert "[model_providers.nightschool]" in shown and "backup first" in shown
        assert sorted(p.name for p in config.parent.iterdir()) == ["config.toml"]  # nothing written yet

        click(qtbot, box.write_button)
        qtbot.waitUntil(lambda: box.states["codex"].text() == "connected", timeout=WAIT_MS)
        assert "[model_providers.nightschool]" in config.read_text()
        assert (home / ".codex/nightschool.config.toml").is_file()
        assert (home / ".codex/config.toml.nightschool-backup").read_bytes() == original
        qtbot.waitUntil(lambda: panel.banner.isVisible(), timeout=WAIT_MS)
        assert "Connected Codex CLI: the endpoint answered a tool-calling request" in panel.banner.text()
        assert "codex --profile nightschool" in panel.banner.text()

        click(qtbot, box.disconnect_buttons["codex"])
        qtbot.waitUntil(lambda: box.states["codex"].text() == "not connected", timeout=WAIT_MS)
        assert config.read_bytes() == original
        assert sorted(p.name for p in config.parent.iterdir()) == ["config.toml"]
    finally:
        panel.controller.stop()
        student.close()
