"""GUI (offscreen): the Training panel's charts and alerts, fed protocol envelopes (round-tripped through JSON, as
they come off the socket or out of events.jsonl) through the controller: eval loss, lr, grad norm, tokens/s, GPU,
rewards; a resume rewinds the series; alerts list with severity, badge and diagnosis."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from app.core.base import protocol as P
from app.core.train.view import JobView, read_diagnosis
from app.ui.training.controller import TrainingController
from app.ui.training.panel import NO_GPU, TrainingPanel

WAIT_MS = 3000


@pytest.fixture
def panel(qtbot, manager):
    controller = TrainingController(manager)
    view = TrainingPanel(controller)
    qtbot.addWidget(view)
    view.resize(1280, 760)
    view.show()
    return view


class Feed:
    """Hands envelopes to the controller the way the Follower does: numbered, and parsed from their JSON line."""

    def __init__(self, panel: TrainingPanel, job_id: str = "job-a") -> None:
        self.controller, self.job_id = panel.controller, job_id
        self.seq = itertools.count(1)
        self.controller.jobs[job_id] = JobView(id=job_id, data="chat.jsonl · default", state="starting")
        self.controller.job_changed.emit(job_id)

    def __call__(self, body: P.Body) -> None:
        env = P.make(body, job=self.job_id, seq=next(self.seq))
        self.controller._on_event(self.job_id, P.loads(P.dumps(env)))

    def train(self, step: int, loss: float, **fields) -> None:
        base = dict(lr=1e-4 * step, grad_norm=1.0 + step / 10, tokens_per_s=500.0 + step, ram_mb=900.0 + step)
        self(P.Metrics(step=step, loss=loss, **{**base, **fields}))


def series(chart, name):
    return chart.points(name)


def test_eval_lr_grad_norm_and_throughput_charts_get_their_points(qtbot, panel):
    feed = Feed(panel)
    feed(P.State(state="running"))
    for step in range(1, 11):
        feed.train(step, 2.0 - step / 10)
        if step % 5 == 0:
            feed(P.Metrics(step=step, eval_loss=2.5 - step / 10))  # the trainer's eval comes as its own event
    assert panel.selected == "job-a"
    steps = [float(s) for s in range(1, 11)]
    assert series(panel.loss_chart, "loss") == [(s, 2.0 - s / 10) for s in steps]
    assert series(panel.loss_chart, "eval loss") == [(5.0, 2.0), (10.0, 1.5)]
    assert series(panel.lr_chart, "lr") == [(s, 1e-4 * s) for s in steps]
    assert series(panel.grad_chart, "grad norm") == [(s, 1.0 + s / 10) for s in steps]
    assert series(panel.throughput_chart, "tokens/s") == [(s, 500.0 + s) for s in steps]
    assert series(panel.memory_chart, "RAM") == [(s, 900.0 + s) for s in steps]
    qtbot.waitUntil(lambda: panel.loss_chart.drawn("loss") == 10 and panel.loss_chart.drawn("eval loss") == 2
                    and panel.lr_chart.drawn("lr") == 10 and panel.throughput_chart.drawn("tokens/s") == 10,
                    timeout=WAIT_MS)
    assert panel.gpu_chart.notice() == NO_GPU  # gpu_util never reported
    assert panel.gpu_chart.points("GPU") == []
    assert panel.reward_chart.isHidden()  # not an RL job


def test_gpu_chart_plots_utilisation_when_reported(qtbot, panel):
    feed = Feed(panel)
    assert panel.gpu_chart.notice() == "no metrics yet"
    feed.train(1, 1.0, gpu_util=87.0, vram_mb=2048.0)
    feed.train(2, 0.9, gpu_util=91.0, vram_mb=2050.0)
    assert panel.gpu_chart.notice() == ""
    assert series(panel.gpu_chart, "GPU") == [(1.0, 87.0), (2.0, 91.0)]
    assert series(panel.memory_chart, "VRAM") == [(1.0, 2048.0), (2.0, 2050.0)]
    qtbot.waitUntil(lambda: panel.gpu_chart.drawn("GPU") == 2, timeout=WAIT_MS)


def test_a_resume_rewinds_the_series_and_the_latest_values_win(qtbot, panel):
    feed = Feed(panel)
    for step in range(1, 9):
        feed.train(step, 10.0 + step)
        if step in (4, 8):
            feed(P.Metrics(step=step, eval_loss=20.0 + step))
    # the engine died after step 8; its last checkpoint was step 5: it re-reports steps 6.. with new values
    feed(P.State(state="resuming", detail="from checkpoint 5 of 12"))
    assert [x for x, _ in series(panel.loss_chart, "loss")] == [1, 2, 3, 4, 5]
    assert series(panel.loss_chart, "eval loss") == [(4.0, 24.0)]
    for step in range(6, 13):
        feed.train(step, 100.0 + step, lr=0.5)
        if step in (8, 12):
            feed(P.Metrics(step=step, eval_loss=200.0 + step))
    loss = series(panel.loss_chart, "loss")
    assert [x for x, _ in loss] == list(range(1, 13))  # no step twice
    assert loss[5:] == [(float(s), 100.0 + s) for s in range(6, 13)]  # after the checkpoint: the new values
    assert loss[:5] == [(float(s), 10.0 + s) for s in range(1, 6)]
    assert series(panel.loss_chart, "eval loss") == [(4.0, 24.0), (8.0, 208.0), (12.0, 212.0)]
    assert [y for x, y in series(panel.lr_chart, "lr") if x > 5] == [0.5] * 7
    assert panel.controller.jobs["job-a"].loss_pts == [(s, y) for s, y in loss]
    assert panel.loss_chart.markers() == [5.0] and panel.grad_chart.markers() == [5.0]
    qtbot.waitUntil(lambda: panel.loss_chart.drawn("loss") == 12, timeout=WAIT_MS)


def test_metrics_for_a_step_already_plotted_replace_it_without_a_resuming_state(qtbot, panel):
    feed = Feed(panel)
    for step in range(1, 7):
        feed.train(step, step * 10.0)
    for step in range(3, 8):  # a resume whose `resuming` state was not seen: steps 3.. come again
        feed.train(step, float(step))
    xs = [x for x, _ in series(panel.loss_chart, "loss")]
    assert xs == [1, 2, 3, 4, 5, 6, 7]
    assert series(panel.loss_chart, "loss")[2:] == [(float(s), float(s)) for s in range(3, 8)]
    assert [x for x, _ in series(panel.memory_chart, "RAM")] == xs


def test_selecting_another_job_shows_its_own_series_and_alerts(qtbot, panel):
    first = Feed(panel, "job-a")
    first.train(1, 1.0)
    first(P.Alert(kind="stall", message="no step for 10 minutes", step=1, severity="warning"))
    second = Feed(panel, "job-b")
    second.train(1, 5.0)
    second.train(2, 4.0)
    assert panel.selected == "job-a"
    assert panel.alerts.count() == 1
    panel.select_job("job-b")
    assert series(panel.loss_chart, "loss") == [(1.0, 5.0), (2.0, 4.0)]
    assert panel.alerts.count() == 0 and panel.alerts.badge.text() == "0"
    panel.select_job("job-a")
    assert series(panel.loss_chart, "loss") == [(1.0, 1.0)] and panel.alerts.count() == 1


def test_alerts_list_badge_and_diagnosis(qtbot, panel, tmp_path):
    diagnosis = tmp_path / "diagnosis.md"
    diagnosis.write_text("# Training diagnosis\n\n"
                         "## WARNING overfit-watch at step 40 (2026-01-01 10:00:00)\n\nEval loss rose.\n\n"
                         "Watch the gap between train and eval loss.\n\nNumbers:\n- gap: 0.4\n\n"
                         "## FATAL nan at step 57 (2026-01-01 10:05:00)\n\nLoss became NaN.\n\n"
                         "The learning rate is probably too high: lower it tenfold and resume.\n\nNumbers:\n"
                         "- loss: nan\n\n", encoding="utf-8")
    feed = Feed(panel)
    feed.train(1, 1.0)
    assert panel.alerts.count() == 0 and panel.alerts.badge.text() == "0"
    feed(P.Alert(kind="overfit-watch", message="eval loss is rising while train loss falls", step=40,
                 severity="warning", diagnosis_path=str(diagnosis)))
    feed(P.Alert(kind="budget", message="half of the token budget is spent", step=50, severity="info"))
    assert panel.alerts.count() == 2 and panel.alerts.badge.text() == "2"
    assert panel.alerts.selected() is None
    row = panel.alerts.row(0)
    assert (row["severity"], row["kind"], row["step"], row["bold"], row["background"]) == (
        "warning", "overfit-watch", 40, False, None)

    panel.alerts.select(0)
    text = panel.alerts.diagnosis_text()
    assert "Watch the gap between train and eval loss." in text and "NaN" not in text  # its own section
    panel.alerts.select(1)  # no diagnosis file: the message is shown
    assert "half of the token budget is spent" in panel.alerts.diagnosis_text()
    assert "No diagnosis file" in panel.alerts.diagnosis_text()

    panel.alerts.tree.clearSelection()
    feed(P.Alert(kind="nan", message="loss is NaN at step 57", step=57, severity="fatal",
                 diagnosis_path=str(diagnosis)))
    assert panel.alerts.count() == 3 and panel.alerts.fatal_count() == 1
    fatal = panel.alerts.row(2)
    assert fatal["severity"] == "fatal" and fatal["bold"] and fatal["background"] is not None
    assert "#a82a33" in panel.alerts.badge.styleSheet()  # the badge turns red
    assert panel.alerts.selected() == 2  # a fatal alert is selected at once: why the run stopped
    assert "lower it tenfold" in panel.alerts.diagnosis_text()


def test_diagnosis_is_read_up_to_the_cap(tmp_path):
    big = tmp_path / "diagnosis.md"
    big.write_text("x" * 5000, encoding="utf-8")
    alert = P.Alert(kind="stall", message="m", step=3, diagnosis_path=str(big))
    text = read_diagnosis(alert, cap=1024)
    assert text.count("x") <= 1024 and "Only the first 1 KB" in text
    missing = P.Alert(kind="stall", message="stalled", diagnosis_path=str(tmp_path / "gone.md"))
    assert "could not be read" in read_diagnosis(missing) and "stalled" in read_diagnosis(missing)


def test_rl_job_shows_mean_and_component_rewards(qtbot, panel):
    feed = Feed(panel)
    assert panel.reward_chart.isHidden()
    feed.train(1, 0.5, reward=0.2, rewards={"format": 0.5, "length": -0.1})
    feed.train(2, 0.4, reward=0.4, rewards={"format": 0.7, "length": 0.1})
    assert not panel.reward_chart.isHidden()
    assert series(panel.reward_chart, "reward") == [(1.0, 0.2), (2.0, 0.4)]
    assert series(panel.reward_chart, "reward · format") == [(1.0, 0.5), (2.0, 0.7)]
    assert series(panel.reward_chart, "reward · length") == [(1.0, -0.1), (2.0, 0.1)]
    qtbot.waitUntil(lambda: panel.reward_chart.drawn("reward · length") == 2, timeout=WAIT_MS)


def test_nonfinite_loss_is_a_gap_not_a_point(qtbot, panel):
    feed = Feed(panel)
    feed.train(1, 1.0)
    feed(P.Metrics.model_validate({"step": 2, "loss": float("nan"), "lr": 0.1}))  # travels as null + nonfinite
    assert series(panel.loss_chart, "loss") == [(1.0, 1.0)]
    assert series(panel.lr_chart, "lr")[-1] == (2.0, 0.1)


class _Follower:
    """Replays a run's events file (a list here) from last_seq on, as app.core.train.engine_client.Follower does."""

    def __init__(self, events: list, sink) -> None:
        self.events, self.sink, self.last_seq, self.connected = events, sink, 0, False

    async def run(self) -> None:
        for env in list(self.events):
            if env.seq > self.last_seq:
                self.last_seq = env.seq
                self.sink(P.loads(P.dumps(env)))


class _CrashingManager:
    """A JobManager stand-in whose engine dies once after step 8 and is restarted from its checkpoint at step 5
    (the new engine appends to the same events file, numbering on)."""

    def __init__(self) -> None:
        self.events, self.run_id, self.seq = [], 1, itertools.count(1)
        self.emit(P.State(state="running"))
        for step in range(1, 9):
            self.emit(P.Metrics(step=step, loss=float(step)))

    def emit(self, body) -> None:
        self.events.append(P.make(body, job="job-c", seq=next(self.seq)))

    def latest_run(self, job_id):
        return SimpleNamespace(id=self.run_id)

    def follower(self, job_id, sink):
        return _Follower(self.events, sink)

    def finalise(self, job_id):
        if self.run_id == 1:  # the engine died without a result: resumed automatically
            self.run_id = 2
            self.emit(P.State(state="resuming", detail="from checkpoint 5 of 10"))
            self.emit(P.State(state="running"))
            for step in range(6, 11):
                self.emit(P.Metrics(step=step, loss=100.0 + step))
            return SimpleNamespace(state="running", error=None)
        return SimpleNamespace(state="completed", error=None)


def test_controller_follows_the_restarted_engine_after_a_crash(qtbot, aio):
    manager = _CrashingManager()
    controller = TrainingController(manager)
    view = TrainingPanel(controller)
    qtbot.addWidget(view)
    seen = []
    controller.point.connect(lambda job, series, x, y: seen.append((series, x)))
    controller._track(SimpleNamespace(id="job-c", dataset_path="/d/chat.jsonl", model_ref="default",
                                      state="running", error=None))
    job = controller.jobs["job-c"]
    qtbot.waitUntil(lambda: job.final, timeout=WAIT_MS)
    assert job.state == "completed" and manager.run_id == 2
    assert [x for s, x in seen if s == "loss"] == [1, 2, 3, 4, 5, 6, 7, 8, 6, 7, 8, 9, 10]  # each event once
    assert job.loss_pts == [(s, float(s)) for s in range(1, 6)] + [(s, 100.0 + s) for s in range(6, 11)]
    assert view.loss_chart.points("loss") == [(float(x), y) for x, y in job.loss_pts]
    assert job.resumes == [5] and view.loss_chart.markers() == [5.0]
