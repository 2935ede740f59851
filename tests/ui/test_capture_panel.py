"""GUI (offscreen): the Capture tab shows watched sessions (totals, charts, projects, transcript, quarantine), follows
appends, imports dropped folders and datasets off the GUI thread and reports them in the status bar."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from tests.core.capture.helpers import assistant, call, result, text, user, write

TIMEOUT_MS = 20_000
SOON_MS = 5_000  # "within seconds": what another process stored shows up this fast
REPO = Path(__file__).resolve().parents[2]
CODEX_ID = "0199aaaa-bbbb-cccc-dddd-eeeeffff0000"
BIG = "y" * (5 * 1024**2)


def claude_records(cwd: str, ask: str, tool: str, output: str, error: bool = False) -> list:
    at, thinking = {"cwd": cwd}, {"type": "thinking", "thinking": "Look first."}
    return [user("u1", None, ask, **at),
            assistant("a1", "u1", [thinking, call("c1", tool, path="x.py")], **at),
            user("u2", "a1", [result("c1", output, is_error=error)], **at),
            assistant("a2", "u2", [text("Done.")], **at)]


def codex_rollout(root: Path) -> Path:
    def item(payload: dict, kind: str = "response_item") -> dict:
        return {"timestamp": "2025-03-02T09:00:00.000Z", "type": kind, "payload": payload}

    return write(root / "2025" / "03" / "02" / f"rollout-2025-03-02T09-00-00-{CODEX_ID}.jsonl",
                 item({"id": CODEX_ID, "cwd": "/home/me/codexproj", "cli_version": "0.77.0"}, "session_meta"),
                 item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List files"}]}),
                 item({"type": "function_call", "name": "shell", "arguments": '{"command": ["ls"]}', "call_id": "k1"}),
                 item({"type": "function_call_output", "call_id": "k1", "output": "a.py\nb.py"}),
                 item({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Two."}]}))


def claude_roots(config) -> Path:
    return Path(config.roots["claude-code"][0])


def drop(window, *paths) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    window.dropEvent(QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                                Qt.KeyboardModifier.NoModifier))


def rows(table) -> list[list[str]]:
    return [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(table.rowCount())]


def row_of(table, column: int, value: str) -> int:
    return next(r for r in range(table.rowCount()) if table.item(r, column).text() == value)


def test_watched_sessions_fill_the_panel_and_appends_show_up(qtbot, make_window, capture_config):
    root = claude_roots(capture_config)
    write(root / "-home-me-proj" / "a.jsonl", *claude_records("/home/me/proj", "Fix calc", "Read",
                                                               "no such file: calc.py", error=True), "{not json")
    write(root / "-home-me-other" / "b.jsonl", *claude_records("/home/me/other", "Run tests", "Bash", BIG))
    codex_rollout(Path(capture_config.roots["codex"][0]))
    window = make_window(watch=True)
    window.tabs.setCurrentWidget(window.capture)
    panel = window.capture
    # the panel re-reads after each ingest; one refresh can read the totals just before the third session's commit
    # and the table just after it, so wait for the refresh that follows the third ingest
    qtbot.waitUntil(lambda: panel.sessions.rowCount() == 3 and "3 sessions" in panel.totals.text(),
                    timeout=TIMEOUT_MS)

    assert "3 sessions" in panel.totals.text() and "2 claude-code, 1 codex" in panel.totals.text()
    lines_in, *parts = map(int, re.search(r"(\d+) lines in = (\d+) stored \+ (\d+) quarantined \+ (\d+) skipped",
                                          panel.totals.text()).groups())
    assert lines_in == sum(parts)  # the balance shown adds up (lines, not quarantine entries)
    assert panel.per_day.categories == ["2025-03-01", "2025-03-02"]
    assert panel.per_day.heights("claude-code") == [2, 0] and panel.per_day.heights("codex") == [0, 1]
    assert panel.tools.values() == {"Read": 1, "Bash": 1, "shell": 1}
    assert {r[0] for r in rows(panel.projects)} == {"(all projects)", "proj", "other", "codexproj"}
    (bad,) = rows(panel.quarantine)
    assert bad[0].endswith("a.jsonl") and bad[1] == "5" and "not valid JSON" in bad[2] and bad[3] == "{not json"
    states = {r[0]: r[2] for r in rows(panel.sources)}
    assert states["claude-code"] == "watching" and states["gemini"] == "watching"

    panel.sessions.selectRow(row_of(panel.sessions, 3, "Fix calc"))
    shown = panel.viewer.toPlainText()
    assert "Read" in shown and "no such file: calc.py" in shown and "Look first." in shown
    assert "#ff8a8a" in panel.viewer.toHtml() and "Outcome" in panel.signals.text()

    panel.projects.selectRow(row_of(panel.projects, 0, "other"))
    assert [r[3] for r in rows(panel.sessions)] == ["Run tests"]
    panel.sessions.selectRow(0)
    assert "more characters" in panel.viewer.toPlainText() and len(panel.viewer.toPlainText()) < 50_000

    panel.projects.selectRow(0)
    write(root / "-home-me-proj" / "c.jsonl", *claude_records("/home/me/proj", "Add a test", "Edit", "ok"))
    qtbot.waitUntil(lambda: "Add a test" in [r[3] for r in rows(panel.sessions)], timeout=TIMEOUT_MS)
    with (root / "-home-me-proj" / "c.jsonl").open("a") as fh:
        fh.write(json.dumps(user("u9", "a2", "and document it", cwd="/home/me/proj")) + "\n")
    new = lambda: rows(panel.sessions)[[r[3] for r in rows(panel.sessions)].index("Add a test")]  # noqa: E731
    qtbot.waitUntil(lambda: new()[4] == "5", timeout=TIMEOUT_MS)
    if os.environ.get("NIGHTSCHOOL_SCREENSHOT"):  # for a look at the layout in the dark theme
        from PySide6.QtWidgets import QApplication

        from app.ui.theme import apply_dark

        apply_dark(QApplication.instance())
        qtbot.wait(200)
        panel.sessions.selectRow(row_of(panel.sessions, 3, "Fix calc"))
        window.grab().save(os.environ["NIGHTSCHOOL_SCREENSHOT"])


def test_a_dropped_folder_is_imported_off_the_gui_thread_and_reported(qtbot, make_window, tmp_path):
    folder = tmp_path / "exported"
    write(folder / "one.jsonl", *claude_records("/home/me/proj", "First", "Read", "ok"))
    write(folder / "two.jsonl", *claude_records("/home/me/proj", "Second", "Grep", "hit"), "[1, 2]")
    window = make_window()  # on the Training tab: a folder still goes to Capture
    drop(window, folder)
    qtbot.waitUntil(lambda: window.statusBar().currentMessage().startswith("Imported"), timeout=TIMEOUT_MS)
    assert window.statusBar().currentMessage() == "Imported 2 files: 9 lines, 8 stored, 1 quarantined, 0 skipped"
    assert window.controller.jobs == {}
    qtbot.waitUntil(lambda: window.capture.sessions.rowCount() == 2, timeout=TIMEOUT_MS)


def test_a_dataset_dropped_on_the_capture_tab_is_registered(qtbot, make_window, tmp_path):
    alpaca = write(tmp_path / "alpaca.jsonl", {"instruction": "Add 2 and 3.", "input": "", "output": "5"},
                   {"instruction": "Say hi.", "output": "Hi!"})
    window = make_window()
    window.tabs.setCurrentWidget(window.capture)
    drop(window, alpaca)
    qtbot.waitUntil(lambda: "accepted" in window.statusBar().currentMessage(), timeout=TIMEOUT_MS)
    assert "alpaca.jsonl (alpaca_v1) accepted" in window.statusBar().currentMessage()
    assert window.controller.jobs == {} and not window.training.banner.isVisible()


def test_keep_out_saves_the_project_rule(make_window, ns_home):
    window = make_window()
    window.capture_controller.keep_out("proj")
    assert json.loads((ns_home / "capture.json").read_text())["exclude"] == ["proj"]
    assert "Keeping 'proj' out" in window.statusBar().currentMessage()


def test_transcript_marks_compaction_images_sub_agents_and_cuts_long_outputs():
    from app.core.capture.session import Part
    from app.core.capture.queries import SessionSummary, TranscriptMessage
    from app.ui.capture.panel import render_transcript

    summary = SessionSummary("s1", "claude-code", "proj", "Fix <b>it</b>", None, 3, 1, 0, "finished", None)
    sub = SessionSummary("s2", "claude-code", "proj", "Explore the repo", None, 4, 2, 0, "finished", None)
    messages = [TranscriptMessage(0, 0, "user", None, [Part("text", "Summary so far")], True, False),
                TranscriptMessage(0, 1, "user", None, [Part("image", "image/png")], False, False),
                TranscriptMessage(0, 2, "tool", None, [Part("tool_result", "z" * 10_000, "Bash")], False, False)]
    html = render_transcript(summary, messages, [sub])
    assert "Fix &lt;b&gt;it&lt;/b&gt;" in html and "COMPACTION SUMMARY" in html
    assert "[image: image/png — not shown]" in html and "Explore the repo" in html
    assert "6,000 more characters" in html and "z" * 4001 not in html


def cli(*args: str) -> subprocess.CompletedProcess:
    """The real `nightschool` command in its own process, on this test's data dir (NIGHTSCHOOL_HOME is inherited)."""
    return subprocess.run([sys.executable, "-m", "app.cli.main", *args], cwd=REPO, env=dict(os.environ),
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_cli_import_in_another_process_shows_up_within_seconds(qtbot, make_window, tmp_path):
    """Issue item 1: the tab re-reads when anyone stores something, not only its own watcher."""
    folder = tmp_path / "exported"
    for n, ask in enumerate(("First", "Second", "Third")):
        write(folder / f"s{n}.jsonl", *claude_records("/home/me/proj", ask, "Read", "ok"))
    window = make_window()
    window.tabs.setCurrentWidget(window.capture)
    panel = window.capture
    assert "0 sessions" in panel.totals.text()

    done = cli("capture", "import", str(folder))
    assert done.returncode == 0, done.stderr

    qtbot.waitUntil(lambda: "3 sessions" in panel.totals.text() and panel.sessions.rowCount() == 3, timeout=SOON_MS)
    assert sorted(r[3] for r in rows(panel.sessions)) == ["First", "Second", "Third"]


def test_one_transcript_under_several_spellings_is_one_session(qtbot, make_window, tmp_path):
    """Issue item 4: `/a/../b/x.jsonl`, `/b/x.jsonl` and the same file through a symlinked folder are one file, and a
    copy of a session file named by its session id elsewhere is the same session: one row, counted once."""
    from tests.core.capture.helpers import SID

    real = write(tmp_path / "b" / f"{SID}.jsonl", *claude_records("/home/me/proj", "Only once", "Read", "ok"))
    (tmp_path / "a").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "b")
    dotted = tmp_path / "a" / ".." / "b" / real.name
    backup = tmp_path / "backup" / real.name
    backup.parent.mkdir()
    backup.write_bytes(real.read_bytes())
    window = make_window()
    window.tabs.setCurrentWidget(window.capture)
    panel = window.capture

    window.capture_controller.import_paths([str(dotted), str(real)])
    qtbot.waitUntil(lambda: window.statusBar().currentMessage().startswith("Imported"), timeout=TIMEOUT_MS)
    assert cli("capture", "import", str(tmp_path / "linked" / real.name)).returncode == 0
    assert cli("capture", "import", str(backup)).returncode == 0
    # the file was read once under its three spellings, the backup once more: 8 lines in, one session holds 4
    qtbot.waitUntil(lambda: int(re.search(r"(\d+) lines in", panel.totals.text()).group(1)) >= 8, timeout=SOON_MS)
    assert [r[3] for r in rows(panel.sessions)] == ["Only once"] and "1 sessions" in panel.totals.text()
    assert "8 lines in = 4 stored + 0 quarantined + 4 skipped" in panel.totals.text()


def test_the_store_upgrade_merges_the_duplicates_an_older_version_stored(qtbot, make_window, store, tmp_path):
    """Issue item 4: a store where an earlier version stored one file under two spellings and two copies of one
    session shows each session once after the upgrade that opening it runs, its counts still balanced."""
    from app.core.base.store import Store
    from tests.core.capture.test_one_copy import store_with_duplicates

    store_with_duplicates(store.path, tmp_path)  # back at revision 0009, with what the old code stored
    Store(store.path).close()  # the app's start: the store is upgraded
    window = make_window()
    window.tabs.setCurrentWidget(window.capture)
    panel = window.capture
    assert sorted(r[3] for r in rows(panel.sessions)) == ["Fix calc", "Fix calc", "One", "Other"]
    assert "4 sessions" in panel.totals.text()
    lines_in, *parts = map(int, re.search(r"(\d+) lines in = (-?\d+) stored \+ (\d+) quarantined \+ (\d+) skipped",
                                          panel.totals.text()).groups())
    assert lines_in == sum(parts) and parts[0] == 5 + 4 + 4 + 4  # what the four sessions hold
