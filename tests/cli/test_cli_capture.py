"""`nightschool capture ...` and `nightschool hooks ...` through the real command-line entry point."""
from __future__ import annotations

import io
import json
import sqlite3

import pytest

from app.cli.main import main
from tests.core.capture.helpers import SID, assistant, text, user


@pytest.fixture
def home(tmp_path, monkeypatch, ns_home):
    fake = tmp_path / "user-home"
    (fake / ".claude" / "projects").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(fake))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("CODEX_HOME", raising=False)
    return fake


def session_file(folder, name=f"{SID}.jsonl"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(user("u1", None, "hi")) + "\n" + json.dumps(assistant("a1", "u1", [text("yo")])) + "\n"
                    + "{broken\n")
    return path


def test_import_a_folder_of_transcripts_and_datasets(home, tmp_path, capsys, ns_home):
    drop = tmp_path / "drop"
    session_file(drop / "claude")
    (drop / "alpaca.jsonl").write_text(json.dumps({"instruction": "Add", "input": "1 2", "output": "3"}) + "\n")
    (drop / "notes.json").write_text('{"what": "no format"}')
    assert main(["capture", "import", str(drop)]) == 0
    out, err = capsys.readouterr()
    assert "lines in 3 = stored 2 + quarantined 1 + skipped 0" in out
    assert "alpaca.jsonl: accepted as alpaca_v1" in out and "notes.json" in err
    assert main(["capture", "import", str(drop)]) == 0  # again: nothing new
    assert "already up to date" in capsys.readouterr().out
    con = sqlite3.connect(ns_home / "nightschool.db")
    assert con.execute("select count(*) from sessions").fetchone()[0] == 1


def test_scan_and_status_use_the_agents_folders(home, capsys):
    session_file(home / ".claude" / "projects" / "-home-me-proj")
    assert main(["capture", "scan"]) == 0
    assert "1 session files ingested" in capsys.readouterr().out
    assert main(["capture", "status"]) == 0
    out = capsys.readouterr().out
    assert "Sessions: 1 (1 claude-code)" in out and "claude-code  not running" in out and "codex        not found" in out


def test_status_reports_the_running_runtimes_watcher_not_its_own(home, capsys):
    """`capture status --json` reads each source's state from the runtime that watches (its status channel); the
    command itself watches nothing, so without a runtime an existing root is "not running", never "stopped"."""
    from app.core.capture.sources import CaptureConfig
    from app.core.runtime.supervisor import Runtime

    assert main(["capture", "status", "--json"]) == 0
    states = {s["agent"]: s["state"] for s in json.loads(capsys.readouterr().out)["sources"]}
    assert states["claude-code"] == "not running" and "stopped" not in states.values()
    runtime = Runtime(role="daemon", keeper=False, capture_config=CaptureConfig.load()).start()
    try:
        assert main(["capture", "status", "--json"]) == 0
        states = {s["agent"]: s["state"] for s in json.loads(capsys.readouterr().out)["sources"]}
        assert states["claude-code"] == "watching"
        assert main(["capture", "status"]) == 0
        assert "claude-code  watching" in capsys.readouterr().out
    finally:
        runtime.stop()


def test_hooks_install_status_hook_and_uninstall(home, capsys, monkeypatch, ns_home):
    settings = home / ".claude" / "settings.json"
    settings.write_text(json.dumps({"model": "opus", "hooks": {"Stop": [{"hooks": [{"type": "command",
                                                                                     "command": "say done"}]}]}}))
    before = json.loads(settings.read_text())
    assert main(["hooks", "install"]) == 0 and main(["hooks", "install"]) == 0
    data = json.loads(settings.read_text())
    assert sum("capture hook" in h["command"] for g in data["hooks"]["Stop"] for h in g["hooks"]) == 1
    assert main(["hooks", "status"]) == 0 and "Stop         installed" in capsys.readouterr().out

    path = session_file(home / ".claude" / "projects" / "p")
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"session_id": SID, "transcript_path": str(path),
                                                             "hook_event_name": "Stop"})))
    assert main(["capture", "hook"]) == 0
    con = sqlite3.connect(ns_home / "nightschool.db")
    assert con.execute("select origin, stored from imports").fetchall() == [("hook", 2)]
    monkeypatch.setattr("sys.stdin", io.StringIO("not json"))
    assert main(["capture", "hook"]) == 0  # garbage from the agent never fails its hook
    assert main(["hooks", "uninstall"]) == 0
    assert json.loads(settings.read_text()) == before
