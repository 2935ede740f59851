"""GUI (offscreen): a dropped file starts a job, the charts get the streamed points, a fatal alert shows its
diagnosis, stop works, re-attach."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent

from app.core.train.events import read_events
from app.ui.training.panel import NO_GPU
from tests.conftest import write_jsonl

TIMEOUT_MS = 240_000


def drop(window, path) -> bool:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    enter = QDragEnterEvent(window.rect().center(), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    window.dragEnterEvent(enter)
    if not enter.isAccepted():
        return False
    event = QDropEvent(QPointF(window.rect().center()), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    window.dropEvent(event)
    return True


def only_job(window) -> str:
    (job_id,) = window.controller.jobs
    return job_id


def test_dropped_file_trains_and_the_loss_chart_fills(qtbot, make_window, chat_file, tiny_model):
    window = make_window(max_steps=30)
    panel = window.training
    panel.model_box.setEditText(str(tiny_model))
    assert drop(window, chat_file)
    job_id = only_job(window)
    assert panel.table.job_ids() == [job_id] and panel.selected == job_id
    qtbot.waitUntil(lambda: window.controller.jobs[job_id].final, timeout=TIMEOUT_MS)
    assert window.controller.jobs[job_id].state == "completed"
    qtbot.waitUntil(lambda: panel.loss_chart.drawn("loss") == 30, timeout=5000)
    xs = [x for x, _ in panel.loss_chart.points("loss")]
    assert xs == list(range(1, 31))
    losses = [y for _, y in panel.loss_chart.points("loss")]
    assert losses[-1] < losses[0]
    assert len(panel.memory_chart.points("RAM")) == 30 and panel.memory_chart.points("VRAM") == []
    # the other charts get the engine's real metrics (tokens/s needs two steps to measure a rate)
    assert [x for x, _ in panel.lr_chart.points("lr")] == list(range(1, 31))
    assert [x for x, _ in panel.grad_chart.points("grad norm")] == list(range(1, 31))
    assert [x for x, _ in panel.throughput_chart.points("tokens/s")] == list(range(2, 31))
    assert all(y > 0 for _, y in panel.throughput_chart.points("tokens/s"))
    gpu = panel.gpu_chart.points("GPU")
    assert (panel.gpu_chart.notice(), len(gpu)) in ((NO_GPU, 0), ("", 30))  # "no GPU", or its utilisation
    assert panel.reward_chart.isHidden()  # not an RL job
    # the run's alerts, if any (this fast, high-lr run may have a gradient spike), are all listed, none invented;
    # test_a_fatal_alert_is_listed_and_its_diagnosis_shown makes one for certain and checks its diagnosis
    run_dir = Path(window.controller.manager.latest_run(job_id).run_dir)
    alerts = [e.body for e in read_events(run_dir / "events.jsonl") if e.type == "alert"]
    assert [panel.alerts.row(i)["kind"] for i in range(panel.alerts.count())] == [a.kind for a in alerts]
    assert panel.alerts.badge.text() == str(len(alerts))
    assert panel.table.text(job_id, "State") == "completed"
    assert panel.table.progress(job_id) == (30, 30)


def test_a_fatal_alert_is_listed_and_its_diagnosis_shown(qtbot, make_window, chat_file, tiny_model, monkeypatch):
    """A NaN written into a weight after step 3 (the engine's test fault) makes step 4's loss NaN: the checker stops
    the run with a fatal alert, which the panel lists, selects at once and explains with its diagnosis.md section."""
    monkeypatch.setenv("NIGHTSCHOOL_FAULT", "nan_loss@3")
    window = make_window(max_steps=30)
    panel = window.training
    panel.model_box.setEditText(str(tiny_model))
    assert drop(window, chat_file)
    job_id = only_job(window)
    qtbot.waitUntil(lambda: window.controller.jobs[job_id].final, timeout=TIMEOUT_MS)
    assert window.controller.jobs[job_id].state == "failed"
    run_dir = Path(window.controller.manager.latest_run(job_id).run_dir)
    [alert] = [e.body for e in read_events(run_dir / "events.jsonl") if e.type == "alert"]
    assert (alert.kind, alert.severity, alert.step) == ("nan", "fatal", 4)
    assert alert.diagnosis_path == str(run_dir / "diagnosis.md")
    assert alert.message in (run_dir / "diagnosis.md").read_text(encoding="utf-8")
    qtbot.waitUntil(lambda: panel.alerts.count() == 1, timeout=5000)
    row = panel.alerts.row(0)
    assert (row["kind"], row["severity"], row["step"], row["message"], row["bold"]) == (
        "nan", "fatal", 4, alert.message, True)
    assert panel.alerts.badge.text() == "1" and panel.alerts.selected() == 0  # fatal: selected at once
    shown = panel.alerts.diagnosis_text()
    assert "FATAL nan at step 4" in shown and alert.message in shown and "Open the whole diagnosis.md" in shown
    assert panel.table.text(job_id, "State") == "failed"


def test_refused_file_shows_why_and_starts_nothing(qtbot, make_window, tmp_path):
    window = make_window()
    bad = write_jsonl(tmp_path / "alpaca.jsonl", [{"instruction": "a", "input": "", "output": "b"}])
    assert drop(window, bad)
    assert window.controller.jobs == {}
    assert window.training.banner.isVisible() and "Alpaca" in window.training.banner.text()


def test_stop_button_saves_and_ends_the_job(qtbot, make_window, chat_file, tiny_model):
    window = make_window(max_steps=5000, save_steps=10**6)
    panel = window.training
    panel.model_box.setEditText(str(tiny_model))
    job_id = panel.start(str(chat_file))
    view = window.controller.jobs[job_id]
    qtbot.waitUntil(lambda: len(view.loss_pts) >= 3 and panel.stop_button.isEnabled(), timeout=TIMEOUT_MS)
    qtbot.mouseClick(panel.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.final, timeout=TIMEOUT_MS)
    assert view.state == "stopped"
    assert 0 < view.step < 5000
    assert not panel.stop_button.isEnabled()
    kinds = {c.kind for c in window.controller.manager.checkpoints(job_id)}
    assert kinds == {"checkpoint", "adapter"}


def test_close_and_reopen_mid_job_replays_history_and_goes_on(qtbot, make_window, chat_file, tiny_model):
    steps = 60  # mid-job at the close (5 points seen); ends in time with a busy core beside torch (200: 243 s)
    first = make_window(max_steps=steps, save_steps=10**6)
    first.training.model_box.setEditText(str(tiny_model))
    job_id = first.training.start(str(chat_file))
    qtbot.waitUntil(lambda: len(first.controller.jobs[job_id].loss_pts) >= 5, timeout=TIMEOUT_MS)
    first.close()  # the engine keeps training
    seen_before_close = len(first.controller.jobs[job_id].loss_pts)
    run = first.controller.manager.latest_run(job_id)
    assert first.controller.manager.is_alive(run)

    second = make_window(max_steps=steps)
    view = second.controller.jobs[job_id]
    qtbot.waitUntil(lambda: len(view.loss_pts) >= seen_before_close, timeout=10_000)
    assert second.training.selected == job_id
    qtbot.waitUntil(lambda: view.final, timeout=TIMEOUT_MS)
    assert view.state == "completed"
    qtbot.waitUntil(lambda: second.training.loss_chart.drawn("loss") == steps, timeout=5000)
    assert [x for x, _ in second.training.loss_chart.points("loss")] == list(range(1, steps + 1))
    assert second.training.table.text(job_id, "State") == "completed"
