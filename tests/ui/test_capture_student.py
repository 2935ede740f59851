"""GUI (offscreen): the Capture tab counts the student's own work apart — real Codex rollouts dropped on the window,
one whose model is the student's served name: the totals say so and its row names who acted."""
from __future__ import annotations

from app.core.ship.serving import SERVED_MODEL
from tests.core.capture.rollouts import STUDENT, TEACHER, rollout
from tests.ui.test_capture_panel import TIMEOUT_MS, drop, rows


def test_the_capture_tab_counts_the_students_own_work_apart(qtbot, make_window, tmp_path):
    folder = tmp_path / "exported"
    rollout(TEACHER, folder)
    rollout(STUDENT, folder, SERVED_MODEL)
    window = make_window()
    drop(window, folder)
    qtbot.waitUntil(lambda: window.capture.sessions.rowCount() == 2, timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: "the student's own work: 1" in window.capture.totals.text(), timeout=TIMEOUT_MS)
    assert window.capture.totals.text().startswith("<b>2 sessions</b> (2 codex) · <b>the student's own work: 1</b>")
    assert sorted(r[1] for r in rows(window.capture.sessions)) == ["codex", "codex (student)"]
