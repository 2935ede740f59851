"""GUI (offscreen): the Experience tab on a real store — the empty state says what to do, counts by reason and the
flagged answers after buffer.record, Accept decides the selected waiting correction (disabled with none selected),
the toggle turns the buffer on, "Set key…" stores the key outside the data dir and shows only where, and "Correct
now" runs on a worker thread and shows what happened; the main window has the tab."""
from __future__ import annotations

import json

import pytest

from app.core.experience import buffer, config, corrections

WAIT_MS = 20_000
SECRET = "sk-gui-9a8b7c6d5e4f3a2b"
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
GOOD_CALL = {"role": "assistant", "tool_calls": [{"type": "function", "function": {
    "name": "read_file", "arguments": json.dumps({"path": "README.md"})}}]}


pytestmark = pytest.mark.usefixtures("keyless")  # no OS keyring; the key file in the test's config dir


@pytest.fixture
def panel(qtbot, store):
    from app.ui.experience.controller import ExperienceController
    from app.ui.experience.panel import ExperiencePanel

    controller = ExperienceController(store, refresh_ms=60_000)  # the tests read when they choose
    view = ExperiencePanel(controller)
    qtbot.addWidget(view)
    view.resize(1180, 700)
    view.show()
    controller.start()
    qtbot.waitUntil(lambda: controller.reads > 0, timeout=WAIT_MS)
    yield view
    controller.stop()


def read(qtbot, panel) -> None:
    """One fresh read of the store, shown."""
    before = panel.controller.reads
    panel.controller.refresh()
    qtbot.waitUntil(lambda: panel.controller.reads > before, timeout=WAIT_MS)


def record(store, exp_id: str, content: str, finish: str = "stop") -> None:
    buffer.record(store, buffer.Recorded(id=exp_id, request={"messages": [{"role": "user", "content": "open it"}],
                                                             "tools": TOOLS, "max_tokens": 32},
                                         answer={"role": "assistant", "content": content}, client="claude-code",
                                         finish_reason=finish))


def cells(table, column: int) -> list[str]:
    return [table.item(r, column).text() for r in range(table.rowCount())]


def test_an_empty_buffer_says_what_to_do(panel):
    assert panel.headline.text() == "The experience buffer is off — nothing is recorded."
    assert not panel.enabled_box.isChecked()
    assert panel.flagged_empty.isVisible() and not panel.flagged.isVisible()
    assert panel.flagged_empty.text() == ("No answers recorded yet — turn the buffer on and send requests to the "
                                          "built-in server.")
    assert "API key is never stored" in panel.sentence.text() and "at most 20,000 entries / 30 days" in \
        panel.sentence.text()
    assert panel.waiting_empty.isVisible() and "No correction waits for review" in panel.waiting_empty.text()
    assert not panel.accept_button.isEnabled() and not panel.reject_button.isEnabled()
    assert panel.budget.text() == "0 of 200,000 tokens today"
    assert panel.key_place.text() == "No key set."
    assert "Set its URL, its model and its key" in panel.hint.text()


def test_counts_by_reason_and_the_flagged_answers_after_records(qtbot, panel, store):
    record(store, "exp-1", '<tool_call>{"name": "read_file", "arguments": {"file": "a"}}</tool_call>')
    record(store, "exp-2", "more " * 20, finish="length")
    record(store, "exp-3", "")
    record(store, "exp-4", "Fine.")
    read(qtbot, panel)
    assert panel.reasons.text().startswith("Needs improvement: 1 invalid tool call · 1 ran to the token limit · "
                                           "1 empty answer · 0 marked bad by the client")
    assert panel.headline.text() == "The experience buffer is off — nothing is recorded. (4 answers kept, 3 needed " \
                                    "improvement.)"
    assert panel.flagged.isVisible() and not panel.flagged_empty.isVisible()
    assert sorted(cells(panel.flagged, 2)) == ["empty answer", "invalid tool call", "ran to the token limit"]
    assert set(cells(panel.flagged, 3)) == {"waits for a correction"}
    assert set(cells(panel.flagged, 1)) == {"claude-code"}


def test_accept_decides_the_selected_waiting_correction(qtbot, panel, store):
    config.set_buffer(store, "require_review", True)
    record(store, "exp-1", "I cannot open files.")
    record(store, "exp-2", "")
    first = buffer.feedback(store, "exp-1", "down", correction=GOOD_CALL)["corrections"][0]["id"]
    second = buffer.feedback(store, "exp-2", "down", correction=GOOD_CALL)["corrections"][0]["id"]
    read(qtbot, panel)
    assert cells(panel.waiting, 0) == [str(first), str(second)]
    assert not panel.accept_button.isEnabled()  # nothing selected yet
    assert "correction waits for review" in cells(panel.flagged, 3)

    panel.waiting.selectRow(1)
    assert panel.accept_button.isEnabled() and panel.reject_button.isEnabled()
    assert "Student: (empty)" in panel.preview.toPlainText()
    assert 'read_file({"path": "README.md"})' in panel.preview.toPlainText()
    panel.accept_button.click()
    qtbot.waitUntil(lambda: corrections.get(store, second)["state"] == "accepted", timeout=WAIT_MS)
    qtbot.waitUntil(lambda: cells(panel.waiting, 0) == [str(first)], timeout=WAIT_MS)
    assert corrections.get(store, first)["state"] == "waiting"
    assert f"Correction {second} accepted" in panel.banner.text()
    assert not panel.accept_button.isEnabled()  # the selection went with the decided row


def test_the_toggle_turns_the_buffer_on_and_the_key_is_stored_outside_the_data_dir(qtbot, panel, store, ns_home,
                                                                                   keyless):
    panel.enabled_box.click()
    qtbot.waitUntil(lambda: config.buffer(store).enabled, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: panel.headline.text().startswith("The experience buffer is on"), timeout=WAIT_MS)

    panel.key_edit.setText(SECRET)
    panel.key_button.click()
    assert panel.key_edit.text() == ""  # the key leaves the widget at once
    key_file = keyless / "teacher.key"
    qtbot.waitUntil(lambda: panel.key_place.text() == f"Kept in {key_file} (readable by you only).",
                    timeout=WAIT_MS)
    assert key_file.read_text().strip() == SECRET
    assert SECRET not in panel.banner.text()
    for path in ns_home.rglob("*"):
        assert not path.is_file() or SECRET.encode() not in path.read_bytes(), path


def test_correct_now_runs_off_the_gui_thread_and_says_why_it_stopped(qtbot, panel, store):
    record(store, "exp-1", "")
    read(qtbot, panel)
    panel.correct_button.click()
    qtbot.waitUntil(lambda: not panel.controller.correcting, timeout=WAIT_MS)
    assert panel.outcome.text().startswith("Nothing corrected: the teacher is not configured: no URL, no model")
    assert panel.correct_button.isEnabled() and panel.correct_button.text() == "Correct now"


def test_the_main_window_has_the_experience_tab(make_window):
    window = make_window()
    index = window.tabs.indexOf(window.experience)
    assert index >= 0 and window.tabs.tabText(index) == "Experience"
