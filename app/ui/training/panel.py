"""Training panel: job list, alerts with their diagnosis, live charts (loss + eval loss, learning rate, gradient norm,
throughput, memory, GPU utilisation, RL reward), pause/resume/stop, open-a-dataset and a message banner."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.core.train.spec import DEFAULT_MODEL
from app.core.train.view import LIVE_STATES, REWARD_PREFIX, read_diagnosis
from app.ui.kit import DIM_STYLE, splitter
from app.ui.training.controller import TrainingController
from widgets.alerts import AlertList
from widgets.banner import Banner
from widgets.charts import (
    GpuChart,
    GradNormChart,
    LiveChart,
    LossChart,
    LrChart,
    MemoryChart,
    RewardChart,
    ThroughputChart,
)
from widgets.job_table import JobTable

NO_GPU = "no GPU — training on the CPU"
NO_JOB_ALERTS = "No job selected: select one to see what the checker found in it."
SHOWS = {"loss_chart": "training and eval loss", "lr_chart": "learning rate", "grad_chart": "gradient norm",
         "throughput_chart": "tokens per second", "memory_chart": "RAM and VRAM use",
         "gpu_chart": "GPU utilisation", "reward_chart": "reward and its components"}  # what each chart draws



class TrainingPanel(QWidget):
    """The view; it subscribes to a TrainingController and never touches sockets or the database."""

    def __init__(self, controller: TrainingController, parent=None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.selected: str | None = None
        self._side_state: tuple | None = None
        self._build()
        controller.job_changed.connect(self._on_job_changed)
        controller.point.connect(self._on_point)
        controller.rewound.connect(self._on_rewound)
        controller.resumed.connect(self._on_resumed)
        controller.alert.connect(self._on_alert)
        controller.message.connect(self.show_message)

    # --- layout ------------------------------------------------------------------------------
    def _build(self) -> None:
        top = self._top_bar()
        self.banner = Banner()
        split = splitter(Qt.Orientation.Horizontal, (self._jobs_and_alerts(), self._chart_grid()), [420, 820],
                         stretch=1)
        bottom = self._job_bar()
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.banner)
        layout.addWidget(split, 1)
        layout.addLayout(bottom)
        self._update_buttons()

    def _top_bar(self) -> QHBoxLayout:
        """Open a dataset, on which model."""
        self.open_button = QPushButton("Open dataset…")
        self.open_button.clicked.connect(self.choose_file)
        self.model_box = QComboBox()
        self.model_box.setEditable(True)
        self.model_box.addItem(DEFAULT_MODEL)
        self.model_box.setToolTip("'default' = embedded SmolLM2-135M-Instruct; or a model folder, or a hub id")
        self.model_box.setMinimumWidth(220)
        hint = QLabel("or drop a chat .jsonl file anywhere on the window")
        hint.setStyleSheet(DIM_STYLE)
        top = QHBoxLayout()
        for w in (self.open_button, QLabel("Model:"), self.model_box, hint):
            top.addWidget(w)
        top.addStretch(1)
        return top

    def _jobs_and_alerts(self) -> QSplitter:
        """The left column: the job table above the selected job's alerts."""
        self.table = JobTable()
        self.table.job_selected.connect(self.select_job)
        self.alerts = AlertList()
        self.alerts.clear(NO_JOB_ALERTS)
        self.alerts.alert_selected.connect(self._on_alert_selected)
        left = splitter(Qt.Orientation.Vertical, (self.table, self.alerts), [260, 340])
        left.setChildrenCollapsible(False)
        return left

    def _chart_grid(self) -> QWidget:
        """The live charts in one grid (the GPU and reward charts shown where a job has them)."""
        self.loss_chart, self.lr_chart, self.grad_chart = LossChart(), LrChart(), GradNormChart()
        self.throughput_chart, self.memory_chart, self.gpu_chart = ThroughputChart(), MemoryChart(), GpuChart()
        self.reward_chart = RewardChart()
        charts = QWidget()
        self.grid = QGridLayout(charts)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setSpacing(4)
        for chart in self.charts():
            chart.setMinimumSize(220, 120)
        self._say_empty(None)
        self._layout_charts(gpu=True, reward=False)
        return charts

    def _job_bar(self) -> QHBoxLayout:
        """The selected job's detail and the commands sent to it."""
        self.detail = QLabel("No job selected.")
        self.detail.setWordWrap(True)
        self.detail.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.pause_button, self.resume_button, self.stop_button = (QPushButton(t) for t in
                                                                   ("Pause", "Resume", "Stop"))
        self.pause_button.clicked.connect(lambda: self._command("pause"))
        self.resume_button.clicked.connect(lambda: self._command("resume"))
        self.stop_button.clicked.connect(lambda: self._command("stop"))
        self.stop_button.setToolTip("Save a checkpoint and the adapter, then end the job")
        bottom = QHBoxLayout()
        bottom.addWidget(self.detail, 1)
        for b in (self.pause_button, self.resume_button, self.stop_button):
            bottom.addWidget(b)
        return bottom

    # --- user actions ------------------------------------------------------------------------
    def choose_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a chat dataset", "", "JSONL (*.jsonl *.json);;All (*)")
        if path:
            self.start(path)

    def start(self, path: str) -> str | None:
        job_id = self.controller.start_file(path, self.model_box.currentText().strip())
        if job_id:
            self.select_job(job_id)
        return job_id

    def _command(self, command: str) -> None:
        if self.selected:
            self.controller.command(self.selected, command)

    def show_message(self, level: str, text: str) -> None:
        self.banner.show_message(level, text)

    # --- controller -> view --------------------------------------------------------------------
    def select_job(self, job_id: str) -> None:
        if job_id == self.selected:
            return
        self.selected = job_id
        self.table.select(job_id)
        view = self.controller.jobs[job_id]
        for chart in self.charts():
            chart.clear_all()
        for series, pts in view.series.items():
            self.chart_for(series).set_series(series, [p[0] for p in pts], [p[1] for p in pts])
        for step in view.resumes:
            self._on_resumed(job_id, step)
        self._say_empty(view)
        self.alerts.clear()
        for index in range(len(view.alerts)):
            self._on_alert(job_id, index)
        self._update_side_charts(view)
        self._on_job_changed(job_id)

    def _say_empty(self, view) -> None:
        """What an empty chart says: which job's what will be drawn there, and from when."""
        for name, what in SHOWS.items():
            chart = getattr(self, name)
            chart.set_empty_text(f"The job's {what} will be drawn here from its first logged step"
                                 if view is not None else f"Select or start a job to see its {what} here")

    def charts(self) -> list[LiveChart]:
        return [self.loss_chart, self.lr_chart, self.grad_chart, self.throughput_chart, self.memory_chart,
                self.gpu_chart, self.reward_chart]

    def chart_for(self, series: str) -> LiveChart:
        """The chart that plots a controller series."""
        if series.startswith("reward"):
            return self.reward_chart
        return {"loss": self.loss_chart, "eval loss": self.loss_chart, "lr": self.lr_chart,
                "grad norm": self.grad_chart, "tokens/s": self.throughput_chart, "RAM": self.memory_chart,
                "VRAM": self.memory_chart, "GPU": self.gpu_chart}[series]

    def _on_job_changed(self, job_id: str) -> None:
        view = self.controller.jobs[job_id]
        self.table.upsert(job_id, state=view.state, step=view.step, total=view.total, eta=view.eta, loss=view.loss,
                          data=view.data)
        if self.selected is None:
            self.select_job(job_id)
        if job_id == self.selected:
            self.detail.setText(self._describe(view))
            self._update_buttons()

    def _on_point(self, job_id: str, series: str, x: float, y: float) -> None:
        if job_id != self.selected:
            return
        self.chart_for(series).append(series, x, y)
        self._update_side_charts(self.controller.jobs[job_id])

    def _on_rewound(self, job_id: str, series: str, x: float) -> None:
        if job_id == self.selected:
            self.chart_for(series).truncate(series, x)

    def _on_resumed(self, job_id: str, step: int) -> None:
        if job_id != self.selected:
            return
        for chart in self.charts():
            chart.add_marker(step, f"resumed from {step}" if chart is self.loss_chart else "")

    def _update_side_charts(self, view) -> None:
        """GPU chart: a notice while no GPU was reported; reward chart: shown for jobs that report rewards."""
        has_reward = any(name == "reward" or name.startswith(REWARD_PREFIX) for name in view.series)
        state = (view.id, view.gpu_reported, view.metrics_seen, has_reward)
        if state == self._side_state:
            return  # called for every point: only a change touches the widgets
        self._side_state = state
        if view.gpu_reported:
            self.gpu_chart.set_notice(None)
        else:
            self.gpu_chart.set_notice(NO_GPU if view.metrics_seen else "no metrics yet")
        self._layout_charts(gpu=view.gpu_reported or not has_reward, reward=has_reward)

    def _layout_charts(self, gpu: bool, reward: bool) -> None:
        """Two columns: loss | lr, grad norm | tokens/s, memory | GPU, then the reward across both for RL jobs;
        an RL job without a GPU shows its reward where the GPU chart would say "no GPU"."""
        if (gpu, reward) == getattr(self, "_layout", None):
            return
        self._layout = (gpu, reward)
        order = [self.loss_chart, self.lr_chart, self.grad_chart, self.throughput_chart, self.memory_chart]
        order += [c for c, shown in ((self.gpu_chart, gpu), (self.reward_chart, reward)) if shown]
        for chart in self.charts():
            self.grid.removeWidget(chart)
        for i, chart in enumerate(order):
            wide = len(order) % 2 == 1 and i == len(order) - 1
            self.grid.addWidget(chart, i // 2, 0 if wide else i % 2, 1, 2 if wide else 1)
        for chart in self.charts():
            chart.setVisible(chart in order)
        rows = (len(order) + 1) // 2
        for row in range(4):
            self.grid.setRowStretch(row, 1 if row < rows else 0)  # equal rows, whatever the plots' size hints
        for col in range(2):
            self.grid.setColumnStretch(col, 1)

    # --- alerts ------------------------------------------------------------------------------------
    def _on_alert(self, job_id: str, index: int) -> None:
        if job_id != self.selected:
            return
        alert = self.controller.jobs[job_id].alerts[index]
        row = self.alerts.add(alert.severity, alert.kind, alert.step, alert.message)
        if alert.severity == "fatal" and self.alerts.selected() is None:
            self.alerts.select(row)  # the run was stopped: say why at once

    def _on_alert_selected(self, index: int) -> None:
        view = self.controller.jobs.get(self.selected) if self.selected else None
        if view is None or index >= len(view.alerts):
            return
        alert = view.alerts[index]
        readable = alert.diagnosis_path and Path(alert.diagnosis_path).is_file()
        self.alerts.show_diagnosis(read_diagnosis(alert), file=alert.diagnosis_path if readable else None)
        self.loss_chart.highlight(alert.step)

    def _describe(self, view) -> str:
        text = f"<b>{view.id}</b> — {view.state}"
        if view.detail:
            text += f": {view.detail}"
        if view.error:
            text += f"<br><span style='color:#ff8a8a'>{view.error.replace(chr(10), '<br>')}</span>"
        return text

    def _update_buttons(self) -> None:
        view = self.controller.jobs.get(self.selected) if self.selected else None
        live = view is not None and view.state in LIVE_STATES
        self.pause_button.setEnabled(live and view.state == "running")
        self.resume_button.setEnabled(live and view.state == "paused")
        self.stop_button.setEnabled(live and view.state in ("running", "paused"))
