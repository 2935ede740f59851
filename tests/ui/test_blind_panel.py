"""GUI (offscreen): the Judge tab's blind test on the blind school (a real held-out set, the shippable model's answers
evaluated through llama.cpp with the served decoding): 10 trials answered by keyboard (1 / 2 / 0, arrows for the
better answer, Backspace to answer one again), Esc stops; a new tab on the same store resumes at trial 11 and
finishes; the stored trials (order, picks, better, seconds) and the share shown; the School tab's chart shows the
share with its n, the 45 % goal line and 50 % chance. The words: tool calls as a tool heading with its arguments,
never `<tool_call>` JSON. Bad input: a model with no held-out set says so in the banner."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt

from app.core.judge.blind import trials as T
from app.core.judge.blind.render import Arg, ContextView, Part, Turn, answer
from app.core.runtime.school.facade import School
from app.ui.judge.blind_words import context_html, figure_rows, parts_html
from tests.conftest import BLIND_TOKENS

WAIT_MS = 30_000
N = 12
# the keys of the first ten trials: the pick, and before it the arrows (if any) saying which answer is better
KEYS = [(Qt.Key.Key_1, ()), (Qt.Key.Key_2, (Qt.Key.Key_Left,)), (Qt.Key.Key_0, (Qt.Key.Key_Down,)),
        (Qt.Key.Key_1, (Qt.Key.Key_Right,)), (Qt.Key.Key_2, ()), (Qt.Key.Key_0, ()),
        (Qt.Key.Key_1, (Qt.Key.Key_Left, Qt.Key.Key_Left)),  # the same arrow again takes it back
        (Qt.Key.Key_2, (Qt.Key.Key_Up,)), (Qt.Key.Key_0, (Qt.Key.Key_Right,)), (Qt.Key.Key_1, ())]
PICK = {Qt.Key.Key_1: "A", Qt.Key.Key_2: "B", Qt.Key.Key_0: "cant_tell"}
BETTER = {Qt.Key.Key_Left: "A", Qt.Key.Key_Right: "B", Qt.Key.Key_Down: "same", Qt.Key.Key_Up: "same"}


def judge_tab(qtbot, store):
    """The Judge tab on `store`, its Blind test view shown, the models listed."""
    from app.ui.judge.blind_controller import BlindController
    from app.ui.judge.controller import JudgeController
    from app.ui.judge.panel import JudgePanel

    panel = JudgePanel(JudgeController(store), BlindController(store, max_new_tokens=BLIND_TOKENS))
    qtbot.addWidget(panel)
    panel.resize(1280, 860)
    panel.show()
    panel.views.setCurrentWidget(panel.blind)
    view = panel.blind
    qtbot.waitUntil(lambda: view.start_button.isEnabled(), timeout=WAIT_MS)
    return panel, view


def showing(view, position: int) -> bool:
    trial = view.controller.trial
    return trial is not None and trial.position == position and not view.controller.busy


def press(qtbot, view, key) -> None:
    qtbot.keyClick(view.trial_page, key)


def answer_by_keys(qtbot, view, position: int, pick, arrows=()) -> None:
    qtbot.waitUntil(lambda: showing(view, position), timeout=WAIT_MS)
    for arrow in arrows:
        press(qtbot, view, arrow)
    press(qtbot, view, pick)


def shown_text(view) -> str:
    return "\n".join(box.toPlainText() for box in (view.context, view.answer_a.view, view.answer_b.view))


def assert_readable(view) -> None:
    """The trial as a person reads it: roles, the answers' tool calls as `▸ Tool` with their arguments, no JSON."""
    trial = view.controller.trial
    text = shown_text(view)
    assert "<tool_call>" not in text and "User" in view.context.toPlainText()
    for side, box in (("A", view.answer_a), ("B", view.answer_b)):
        for part in answer(trial.sides[side]):
            if part.kind == "call":
                assert f"▸ {part.tool}" in box.view.toPlainText()
                assert all(arg.key in box.view.toPlainText() for arg in part.args)
            elif part.kind == "broken":  # what was written, said to be a call that does not parse
                assert "▸ a tool call that does not parse:\n" + part.text in box.view.toPlainText()
                text = text.replace(part.text, "")
    assert '"arguments"' not in text and '"name":' not in text  # every call that parses: no JSON
    assert view.status.text().startswith(f"Trial {trial.position + 1} of {N}")


@pytest.mark.slow  # the blind school: a held-out set built and evaluated through llama.cpp once per session
def test_ten_trials_by_keyboard_stop_reopen_and_finish(qtbot, blind_store):
    panel, view = judge_tab(qtbot, blind_store)
    assert view.model_box.currentData() is None and view.model_box.currentText().startswith("Deployed student")
    view.n_box.setValue(N)
    qtbot.mouseClick(view.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: showing(view, 0), timeout=WAIT_MS)
    assert view.pages.currentWidget() is view.trial_page and view.answer_a.isVisible() and view.answer_b.isVisible()
    context, a, b = (w.mapTo(view.trial_page, QPoint(0, 0)) for w in (view.context, view.answer_a, view.answer_b))
    assert a.y() == b.y() and a.x() + view.answer_a.width() <= b.x()  # the answers side by side
    assert context.y() + view.context.height() <= a.y()  # below the context
    test_id = view.controller.test.id

    for position, (pick, arrows) in enumerate(KEYS[:3]):
        qtbot.waitUntil(lambda p=position: showing(view, p), timeout=WAIT_MS)
        assert_readable(view)
        answer_by_keys(qtbot, view, position, pick, arrows)
    # Backspace: trial 3 again, with its stored better answer; a new answer replaces the stored one
    qtbot.waitUntil(lambda: showing(view, 3), timeout=WAIT_MS)
    press(qtbot, view, Qt.Key.Key_Backspace)
    qtbot.waitUntil(lambda: showing(view, 2), timeout=WAIT_MS)
    assert view.controller.better == "same" and view.same.isChecked() and view.answer_a.note.text() == "as good"
    answer_by_keys(qtbot, view, 2, Qt.Key.Key_2, (Qt.Key.Key_Down, Qt.Key.Key_Right))
    KEYS[2] = (Qt.Key.Key_2, (Qt.Key.Key_Right,))
    for position, (pick, arrows) in enumerate(KEYS[3:], start=3):
        answer_by_keys(qtbot, view, position, pick, arrows)
        if position == 5:
            qtbot.waitUntil(lambda: showing(view, 6), timeout=WAIT_MS)
            assert_readable(view)
    qtbot.waitUntil(lambda: showing(view, 10), timeout=WAIT_MS)
    press(qtbot, view, Qt.Key.Key_Escape)  # stop for now
    qtbot.waitUntil(lambda: view.pages.currentWidget() is view.intro and view.start_button.text()
                    == f"Resume (10 of {N} answered)", timeout=WAIT_MS)
    assert "Stopped blind test" in view.banner.text() and not view.n_box.isEnabled()

    stored = T.load(blind_store, test_id)
    assert stored.answered == 10 and stored.finished_at is None and stored.next_trial().position == 10
    for trial, (pick, arrows) in zip(stored.trials, KEYS):
        said = [BETTER[a] for a in arrows]
        better = None if len(said) == 2 and said[0] == said[1] else (said[-1] if said else None)
        assert (trial.pick, trial.better) == (PICK[pick], better), trial.position
        assert trial.seconds >= 0 and trial.answered_at is not None  # the time it was shown (keys come fast here)
    assert sum(t.seconds for t in stored.trials[:10]) > 0
    panel.close()

    # a new tab on the same store: Resume goes on at trial 11, and the test finishes
    panel, view = judge_tab(qtbot, blind_store)
    qtbot.waitUntil(lambda: view.start_button.text() == f"Resume (10 of {N} answered)", timeout=WAIT_MS)
    qtbot.mouseClick(view.start_button, Qt.MouseButton.LeftButton)
    answer_by_keys(qtbot, view, 10, Qt.Key.Key_0)
    answer_by_keys(qtbot, view, 11, Qt.Key.Key_1, (Qt.Key.Key_Left,))
    qtbot.waitUntil(lambda: view.controller.trial is None and "is finished" in view.intro.toPlainText(),
                    timeout=WAIT_MS)
    done = T.load(blind_store, test_id)
    assert done.done and done.finished_at is not None and done.id == test_id
    assert [t.position for t in done.trials] == list(range(N)) and done.trials[11].better == "A"
    hidden = sum(1 for t in done.trials if t.pick != t.agent_side)  # a wrong pick or can't tell
    [result] = School(blind_store).blind_results()
    assert (result["trials"], result["indistinguishable"]) == (N, hidden)
    text = view.intro.toPlainText()
    assert f"{round(hidden / N * 100)} % indistinguishable — {hidden} of {N} trials" in text
    assert (f"95 % CI {result['low'] * 100:.0f}–{result['high'] * 100:.0f} %" in text if result["low"] is not None
            else "no interval" in text)
    assert "goal of 45 %" in text

    # the School tab: the share as a bar with its n, the interval, the goal and chance lines
    from app.ui.school.controller import SchoolController
    from app.ui.school.panel import SchoolPanel

    school = SchoolPanel(SchoolController(blind_store))
    qtbot.addWidget(school)
    school.resize(1280, 800)
    school.show()
    school.controller.refresh()
    qtbot.waitUntil(lambda: school.controller.reads > 0, timeout=WAIT_MS)
    chart = school.blind_chart
    assert chart.heights() == [pytest.approx(hidden / N)] and chart.ticks() == [f"base (n={N})"]
    assert chart.goal_line.value() == 0.45 and chart.chance_line.value() == 0.5 and chart.notice.shown() == ""
    assert (chart.errors is not None) == (result["low"] is not None)
    school.controller.stop()


def test_a_model_with_no_held_out_set_is_said_in_the_banner(qtbot, store):
    _panel, view = judge_tab(qtbot, store)
    qtbot.mouseClick(view.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.banner.isVisible() and not view.controller.busy, timeout=WAIT_MS)
    assert "No blind test" in view.banner.text() and "has no held-out set" in view.banner.text()
    assert "nightschool dataset build" in view.banner.text()  # what to do
    assert view.controller.trial is None and view.pages.currentWidget() is view.intro and view.start_button.isEnabled()


def test_tool_calls_read_as_a_tool_and_its_arguments():
    call = Part("call", tool="Bash", args=(Arg("command", "pytest -q\nruff .", code=True), Arg("timeout", "60")))
    html = parts_html((Part("text", text="Run the tests <now>."), call, Part("broken", text='{"name": "Ed')))
    assert "▸ Bash" in html and "&lt;now&gt;" in html and "<pre" in html and "timeout</td>" in html
    assert "does not parse" in html and "<tool_call>" not in html
    view = ContextView((Turn("user", (Part("text", text="fix it"),)), Turn("tool", (Part("text", text="ok"),), 900)),
                       earlier=3, tools=("Read", "Bash"))
    html = context_html(view)
    assert "3 earlier messages not shown" in html and "Tools offered: Read, Bash" in html
    assert "User" in html and "Tool result" in html and "cut 900 characters" in html
    rows = figure_rows([{"model": "#12 job-1 final", "judge": "teacher", "share": 0.5, "low": 0.3, "high": 0.7,
                         "trials": 20}, {"model": "base", "judge": "person", "share": None, "trials": 0}])
    assert rows == [("#12 final (teacher)", 0.5, 0.3, 0.7, 20)]
