"""GUI (offscreen): the School tab — status, history chart, report card and empty state from cycle rows in the store;
Approve only for a cycle waiting for approval (and it writes the decision); a refused policy value says why; the window
attaches as a viewer to a runtime another process holds (no runtime, no ticking) and shows its stage events live;
closing a window that runs the school hands it to a daemon when asked, or stops it."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from PySide6.QtCore import Qt

from app.core.runtime.school import cycles
from app.core.runtime.machinery import lock
from app.core.runtime.school.facade import School

REPO = Path(__file__).resolve().parents[2]
WAIT_MS = 20_000

# A runtime held by ANOTHER process: started, then driven line by line from stdin (so the test knows when each step
# happened); it exits on "stop" or when stdin closes.
DAEMON = r"""
import json, sys
from app.core.runtime.school import cycles
from app.core.runtime.supervisor import Runtime

rt = Runtime(role="daemon", capture=False, keeper=False).start()
print("ready", rt.lock.info["pid"], flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["do"] == "stage":
        cycle = cycles.create(rt.store, "default", "run now (test)", {"new_sessions": 4})
        cycles.update(rt.store, cycle.id, stage=cmd["stage"])
        rt.bus.publish("cycle.stage", cycle=cycle.id, stage=cmd["stage"], resumed=False)
    elif cmd["do"] == "publish":
        rt.bus.publish(cmd["type"], **cmd["body"])
    else:
        break
    print("done", flush=True)
rt.stop()
"""

# A stand-in for `nightschool daemon` (the hand-over waits for role "daemon" on the lock); stops on SIGTERM.
STAND_IN_DAEMON = r"""
import signal, threading
from app.core.runtime.supervisor import Runtime

rt = Runtime(role="daemon", capture=False, keeper=False).start()
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: done.set())
done.wait()
rt.stop()
"""


def card(cycle_id: int, agreement: float, validity: float, loss: float, verdict: str = "pass",
         deployed: bool = True) -> dict:
    base = {"agreement": 0.30, "validity": 0.80, "loss": 2.0}
    values = {"agreement": agreement, "validity": validity, "loss": loss}
    metrics = {k: {"base": base[k], "previous": base[k], "candidate": v, "vs_base": round(v - base[k], 4),
                   "vs_previous": round(v - base[k], 4)} for k, v in values.items()}
    return {"summary": f"cycle {cycle_id}, held-out loss {base['loss']:.3f} → {loss:.3f}, agreement "
                       f"{base['agreement']:.3f} → {agreement:.3f}, gate: {verdict}",
            "metrics": metrics, "verdict": verdict,
            "reasons": ["agreement 0.550 ≥ 0.300 + 0.02", "validity did not drop"] if verdict == "pass"
            else ["agreement fell below the base's"],
            "gained": [{"prompt": "user: list the files", "teacher": '<tool_call>{"name": "ls"}</tool_call>',
                        "before": "I cannot do that.", "after": '<tool_call>{"name": "ls"}</tool_call>',
                        "outcome_before": "no_call", "outcome_after": "agree"}],
            "lost": [], "times": {"building": 12.0, "training": 300.0}, "deployed": deployed if verdict == "pass"
            else None, "sessions": 4, "examples": 40, "steps": 60}


def ended_cycle(store, state: str, report: dict | None, reason: str = "") -> int:
    cycle = cycles.create(store, "default", "4 new usable sessions (policy: 3)", {"new_sessions": 4})
    cycle = cycles.update(store, cycle.id, stage="deploying" if state == "done" else "judging")
    return cycles.finish(store, cycle, state, reason, report).id


@pytest.fixture
def panel(qtbot, store):
    from app.ui.school.controller import SchoolController
    from app.ui.school.panel import SchoolPanel

    controller = SchoolController(store)
    view = SchoolPanel(controller)
    qtbot.addWidget(view)
    view.resize(1180, 700)
    view.show()
    yield view
    controller.stop()


def read(qtbot, panel) -> None:
    """One fresh read of the state, shown."""
    before = panel.controller.reads
    panel.controller.refresh()
    qtbot.waitUntil(lambda: panel.controller.reads > before, timeout=WAIT_MS)

@contextlib.contextmanager
def handed_over(window):
    """The window closed and handed the school to the stand-in daemon: it holds the data dir (stopped after)."""
    holder = lock.holder()
    try:
        assert window.handover is not None and window.handover[0], window.handover
        assert holder is not None and holder["role"] == "daemon" and holder["pid"] != os.getpid()
        assert window.runtime.stopping.is_set() and f"daemon pid {holder['pid']}" in window.handover[1]
        yield holder
    finally:
        if holder is not None and holder["role"] == "daemon":
            os.kill(holder["pid"], signal.SIGTERM)
            psutil.Process(holder["pid"]).wait(timeout=30)


def test_an_empty_school_says_how_far_the_first_cycle_is(qtbot, panel, store):
    School(store).set_policy("min_sessions", 50)
    read(qtbot, panel)
    assert panel.headline.text() == "No cycle yet — 0 of 50 sessions captured"
    assert panel.sessions.format() == "sessions 0/50"
    assert "A report card appears here when a cycle ends" in panel.card.text()
    assert panel.history_empty.isVisible() and not panel.history.isVisible()
    lines = panel.next_lines.text().splitlines()
    assert lines[0] == "0 new sessions — captured sessions no cycle of the built-in SmolLM2 has trained on yet " \
                       "(held-out and bad ones aside); 50 start a cycle."  # what the count means
    assert lines[2] == "Waits for 50 more sessions."
    assert panel.scores_chart.notice() == "no judged cycle yet" and not panel.scores_chart.has_data()
    assert "nothing yet" in panel.student.text()
    assert panel.stages.current() is None and panel.stages.look("building") == "todo"
    assert not panel.approve_button.isEnabled() and not panel.refuse_button.isEnabled()
    assert panel.run_button.isEnabled()


def test_history_chart_and_report_card_from_the_store(qtbot, panel, store):
    first = ended_cycle(store, "done", card(1, 0.45, 0.90, 1.6))
    second = ended_cycle(store, "refused", card(2, 0.25, 0.85, 1.7, verdict="fail"), reason="the gate refused it")
    read(qtbot, panel)

    assert panel.scores_chart.points("agreement") == [(first, 0.45), (second, 0.25)]
    assert panel.scores_chart.points("validity") == [(first, 0.90), (second, 0.85)]
    assert panel.loss_chart.points("loss") == [(first, 1.6), (second, 1.7)]
    assert [y for _, y in panel.loss_chart.points("base loss")] == [2.0, 2.0]  # the base's dashed reference
    assert panel.scores_chart.notice() == ""
    assert panel.history.rowCount() == 2 and panel.history.item(0, 0).text() == str(second)
    assert panel.history.item(0, 1).text() == "refused"

    # the newest ended cycle's card: summary, verdict with reasons, metrics with deltas
    text = panel.card.text()
    assert f"Cycle {second} — refused" in text and "agreement 0.300 → 0.250" in text
    assert "Gate: refused" in text and "the gate refused it" in text and "agreement fell below" in text
    assert panel.card.table.text("agreement", "candidate") == "0.250"
    assert panel.card.table.text("agreement", "vs base") == "-0.050"
    assert panel.card.table.text("loss", "vs base") == "-0.300"
    # nothing deployed (in this store): the student box shows the last candidate's scores against the base
    assert "Last candidate (not deployed): agreement 0.250 (−0.050 vs base)" in panel.student.text()
    assert panel.headline.text() == f"No cycle running — cycle {second} refused; its report card says why"
    assert panel.stages.look("judging") == "refused"

    # selecting a history row shows that cycle's card, with its examples
    panel.history.selectRow(1)
    text = panel.card.text()
    assert f"Cycle {first} — finished" in text and "Gate: passed — deployed" in text
    assert "Gained (agrees with the teacher now)" in text and "I cannot do that." in text
    assert panel.card.table.text("validity", "vs previous") == "+0.100"


def test_an_inconclusive_card_shows_each_check_with_its_interval(qtbot, panel, store):
    """The gate's checks as the cycle recorded them: marked, with their intervals and counts, and why."""
    from app.core.judge.evidence import Evidence
    from app.core.judge.gate import judge
    from app.core.judge.report import EvalReport

    def evidence(per_token: float, agree: set[int]) -> Evidence:
        report = EvalReport(label="m", base_model="default", eval_set="d/test", eval_set_sha256="s" * 64,
                            metrics={"loss": per_token, "agreement": len(agree) / 28})
        losses = {f"e{i}": {"key": f"e{i}", "nll": per_token * (30 + i), "tokens": 30 + i} for i in range(24)}
        actions = {f"c{i}": {"key": f"c{i}", "outcome": "agree" if i in agree else "no_call"} for i in range(28)}
        return Evidence(report, losses, actions)

    verdict = judge(evidence(1.959, {3, 17, 4}), evidence(1.979, {3, 17}))
    assert verdict.verdict == "inconclusive"
    report = {**card(1, 0.107, 0.9, 1.959, verdict="inconclusive"), "reasons": verdict.reasons,
              "checks": [c.model_dump() for c in verdict.checks], "notes": verdict.notes}
    ended_cycle(store, "refused", report, reason="the gate refused the candidate (inconclusive: no evidence that it "
                                                 "is better): " + "; ".join(verdict.reasons))
    read(qtbot, panel)
    text = panel.card.text()
    assert "Gate: inconclusive" in text
    assert "· held-out loss 1.979 → 1.959 (−1.0 %, 95 % CI −1.0 %…−1.0 % per example (the evidence names no " \
           "sessions), 24 examples) vs the base model: below the 2 % minimum" in text
    assert "· next-action agreement 0.071 → 0.107 (+1 of 28 actions: 1 gained, 0 lost, McNemar p 1.000, 95 % CI" in text
    assert "no primary metric (loss, agreement) improved significantly" in text
    assert text.count("McNemar") == 1  # the cycle's reason is not repeated under the checks


def test_approve_only_for_a_cycle_waiting_for_approval(qtbot, panel, store):
    running = cycles.create(store, "default", "run now (test)", {"new_sessions": 4})
    cycles.update(store, running.id, stage="training")
    read(qtbot, panel)
    assert panel.stages.current() == "training" and panel.stages.look("building") == "done"
    assert panel.headline.text().startswith(f"Cycle {running.id} — training")
    assert not panel.approve_button.isEnabled() and not panel.run_button.isEnabled()

    cycles.update(store, running.id, stage="deploying", state="approval",
                  outputs={"judging": {"checkpoint": 7, "reasons": []}})
    read(qtbot, panel)
    assert panel.approve_button.isEnabled() and panel.refuse_button.isEnabled()
    assert panel.stages.look("deploying") == "approval"
    assert "waits for your approval" in panel.headline.text()
    qtbot.mouseClick(panel.approve_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: cycles.get(store, running.id).inputs.get("approval") == "approved", timeout=WAIT_MS)
    qtbot.waitUntil(lambda: "deployment approved" in panel.banner.text(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not panel.approve_button.isEnabled(), timeout=WAIT_MS)  # the read after it: running
    assert panel.stages.look("deploying") == "running"


def test_policy_edits_go_through_the_school_and_a_refusal_says_why(qtbot, panel, store):
    read(qtbot, panel)
    assert panel.window_edit.text() == "02:00-06:00" and panel.deploy_box.currentText() == "auto"
    panel.deploy_box.setCurrentText("ask")
    panel.deploy_box.activated.emit(panel.deploy_box.currentIndex())
    panel.min_sessions.setValue(3)
    panel.apply_min_sessions()  # at once: the commands run one after the other, neither change is lost
    qtbot.waitUntil(lambda: "Policy min_sessions is now 3" in panel.banner.text(), timeout=WAIT_MS)
    assert School(store).policy()["deploy"] == "ask" and School(store).policy()["min_sessions"] == 3
    assert panel.train_on_box.currentText() == "default"
    panel.train_on_box.setCurrentText("ray")
    panel.train_on_box.activated.emit(panel.train_on_box.currentIndex())
    qtbot.waitUntil(lambda: School(store).policy()["train_on"] == "ray", timeout=WAIT_MS)

    panel.window_edit.setText("25:00-99:00")
    panel.apply_window()
    qtbot.waitUntil(lambda: "Not changed" in panel.banner.text(), timeout=WAIT_MS)
    assert "window cannot be '25:00-99:00'" in panel.banner.text() and "HH:MM-HH:MM" in panel.banner.text()
    assert panel.banner.isVisible()
    assert School(store).policy()["window"] == "02:00-06:00"
    qtbot.waitUntil(lambda: panel.window_edit.text() == "02:00-06:00", timeout=WAIT_MS)  # back to the stored value


def test_commands_come_back_in_the_order_given(qtbot, panel, store):
    """Each command's outcome is posted before the next command runs (else two quick edits could end the banner on
    the first one's words, as a CI run once showed)."""
    controller, log = panel.controller, []
    post, set_policy = controller._post, controller.school.set_policy
    controller._post = lambda handler, args: (handler == controller._on_read or log.append("posted"),
                                              post(handler, args))  # a command's outcome, not a read
    controller.school.set_policy = lambda key, value: (log.append(f"runs {key}"), set_policy(key, value))[1]
    read(qtbot, panel)
    log.clear()
    for value in (4, 5, 6):
        controller.set_policy("min_sessions", value)
    qtbot.waitUntil(lambda: log.count("posted") >= 3, timeout=WAIT_MS)
    assert log[:6] == ["runs min_sessions", "posted"] * 3
    qtbot.waitUntil(lambda: "Policy min_sessions is now 6" in panel.banner.text(), timeout=WAIT_MS)
    assert School(store).policy()["min_sessions"] == 6


def test_the_window_opens_on_the_school_tab_with_its_own_runtime(qtbot, make_window):
    window = make_window()
    assert window.tabs.tabText(0) == "School" and window.tabs.currentWidget() is window.school
    assert window.link.mode == "own" and window.runtime is not None
    assert (lock.holder() or {}).get("role") == "window"
    assert window.queue_controller.queue is window.runtime.queue  # the runtime ticks it, the tab only reads it
    qtbot.waitUntil(lambda: window.school_controller.reads >= 1, timeout=WAIT_MS)
    assert window.school.headline.text().startswith("No cycle yet — 0 of ")
    assert "Learning runs in this window" in window.school.footer.text()
    window.close()
    assert window.runtime.stopping.is_set() and lock.holder() is None  # "No" (the tests' answer): it stops


# --- a runtime held by another process ---------------------------------------------------------------------------
@pytest.fixture
def daemon(store, ns_home):
    School(store).pause()  # the daemon's orchestrator leaves the test's cycle alone
    env = {**os.environ, "NIGHTSCHOOL_HOME": str(ns_home), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", DAEMON], cwd=REPO, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def send(**cmd) -> None:
        proc.stdin.write(json.dumps(cmd) + "\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done", proc.stderr.read()

    line = proc.stdout.readline()  # blocks until the daemon holds the lock (or dies)
    assert line.startswith("ready"), proc.stderr.read()
    proc.send = send
    yield proc
    if proc.poll() is None:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_the_window_attaches_as_a_viewer_of_a_daemon(qtbot, make_window, daemon, monkeypatch):
    from app.core.queue.scheduler import Queue
    from app.core.runtime.supervisor import Runtime

    def no_runtime(self):
        raise AssertionError("the window started a runtime while a daemon holds the lock")

    ticks = []
    monkeypatch.setattr(Runtime, "start", no_runtime)
    monkeypatch.setattr(Queue, "tick", lambda self, *a, **k: ticks.append(1))
    window = make_window()
    assert window.runtime is None and window.link.mode == "viewer"
    qtbot.waitUntil(lambda: window.link.connected, timeout=WAIT_MS)
    assert window.link.pid == daemon.pid and window.link.role == "daemon"
    assert f"runs in the daemon (pid {daemon.pid})" in window.school.footer.text()
    # the queue tab reads the queue every second and never schedules
    queue = window.queue_controller
    qtbot.waitUntil(lambda: queue.ticks >= 2, timeout=WAIT_MS)
    assert ticks == []  # Queue.tick was never called in this process
    # no capture of its own: the capture tab says who captures
    assert not window.capture_controller.running and not window.capture_controller.watch
    assert all(s.state == f"capturing in the daemon (pid {daemon.pid})" for s in window.capture_controller.sources())

    # a stage the daemon enters shows live
    daemon.send(do="stage", stage="training")
    school = window.school
    qtbot.waitUntil(lambda: school.stages.current() == "training", timeout=WAIT_MS)
    assert school.stages.look("building") == "done" and "— training" in school.headline.text()
    # its progress and ETA, too
    cycle_id = window.school_controller.status["cycle"]["id"]
    daemon.send(do="publish", type="cycle.progress", body={"cycle": cycle_id, "stage": "training", "phase": "train",
                                                           "step": 30, "total": 120, "eta_s": 600})
    qtbot.waitUntil(lambda: "30/120" in school.progress_text.text(), timeout=WAIT_MS)
    assert "about 10 min left" in school.progress_text.text() and school.progress.value() == 30
    # a notification: no tray host offscreen, so the window's banner says it
    assert window.tray.icon is None
    daemon.send(do="publish", type="cycle.done", body={"cycle": cycle_id, "summary": "cycle 1, agreement up"})
    qtbot.waitUntil(lambda: "cycle 1, agreement up" in window.banner.text(), timeout=WAIT_MS)
    assert window.banner.isVisible() and f"Cycle {cycle_id} finished" in window.banner.text()

    # closing a viewer does not ask and leaves the daemon running
    window.ask_on_close = True
    window.ask_keep_learning = lambda: pytest.fail("a viewer must not ask")
    window.close_asking()  # as the close button or the tray's Quit does
    assert daemon.poll() is None and (lock.holder() or {}).get("pid") == daemon.pid


# --- closing a window that runs the school -----------------------------------------------------------------------
def test_closing_hands_the_school_to_a_daemon_when_asked(qtbot, make_window, ns_home):
    window = make_window()
    window.ask_on_close = True
    window.ask_keep_learning = lambda: True
    window.daemon_command = [sys.executable, "-c", STAND_IN_DAEMON]
    window.close_asking()  # as the close button or the tray's Quit does
    with handed_over(window) as holder:
        assert os.getsid(holder["pid"]) == holder["pid"]  # its own session: it outlives the window


def test_closing_asks_and_no_stops_the_school(qtbot, make_window):
    window = make_window()
    window.ask_on_close = True
    asked = []
    window.ask_keep_learning = lambda: asked.append(1) or False
    window.close_asking()  # as the close button or the tray's Quit does
    assert asked == [1] and window.handover is None
    assert window.runtime.stopping.is_set() and lock.holder() is None


def test_cancel_keeps_the_window_open(qtbot, make_window):
    window = make_window()
    window.ask_on_close = True
    window.ask_keep_learning = lambda: None
    window.close_asking()  # as the close button or the tray's Quit does
    assert window.isVisible() and not window.runtime.stopping.is_set()
    window.ask_on_close = False


def test_the_words_of_the_state():
    from app.ui.school.words import eta_words, notice_text, progress_words, student_lines, tray_state

    status = {"student": {"base_model": "default", "deployed_checkpoint": 7, "deployed_label": "job-1 step 60",
                          "served": {"model": "student-q4_k_m", "url": "http://127.0.0.1:8765/v1", "parked": True}}}
    history = [{"id": 2, "state": "refused", "report": {"checkpoint": 8, **card(2, 0.2, 0.7, 2.2, verdict="fail")}},
               {"id": 1, "state": "done", "report": {"checkpoint": 7, **card(1, 0.45, 0.9, 1.6)}}]
    lines = student_lines(status, history)
    assert lines[1] == "Deployed: checkpoint #7 (job-1 step 60)"
    assert lines[2] == "Scores: agreement 0.450 (+0.150 vs base), validity 0.900 (+0.100 vs base), loss 1.600 " \
                       "(−0.400 vs base)"  # the deployed checkpoint's card, not the newer refused one
    assert lines[3] == "Served: student-q4_k_m at http://127.0.0.1:8765/v1 (parked while training)"
    assert eta_words(42) == "about 42 s left" and eta_words(3 * 3600 + 5 * 60) == "about 3 h 05 min left"
    assert progress_words({"phase": "generate", "step": 3, "total": 8, "eta_s": None}) == (3, 8, "generate · 3/8")
    assert notice_text({"type": "cycle.failed", "cycle": 5, "stage": "building", "reason": "no new sessions"}) == (
        "Cycle 5 failed at building", "no new sessions", "error")
    assert notice_text({"type": "stage.failed", "cycle": 5, "stage": "building", "reason": "x"})[0] == \
        "Cycle 5: building failed"
    assert tray_state(None) == "idle" and tray_state({"cycle": {"stage": "refining"}}) == "training"
    assert tray_state({"cycle": {"stage": "exporting"}}) == "judging" and tray_state({}, failed=True) == "error"
