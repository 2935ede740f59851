"""Training panel: job list, live loss and memory charts, pause/resume/stop, open-a-dataset and a message banner."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QComboBox, QFileDialog, QHBoxLayout, QLabel, QPushButton, QSplitter, QVBoxLayout,
                               QWidget)

from app.core.spec import DEFAULT_MODEL
from app.ui.training import LIVE_STATES, TrainingController
from widgets.charts import LossChart, MemoryChart
from widgets.job_table import JobTable

BANNER_STYLE = {"error": "background:#5c1f24;color:#ffd7d7;padding:8px;border-radius:4px;",
                "info": "background:#1f3b5c;color:#d7e8ff;padding:8px;border-radius:4px;"}


class TrainingPanel(QWidget):
    """The view; it subscribes to a TrainingController and never touches sockets or the database."""

    def __init__(self, controller: TrainingController, parent=None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.selected: str | None = None
        self._build()
        controller.job_changed.connect(self._on_job_changed)
        controller.point.connect(self._on_point)
        controller.message.connect(self.show_message)

    # --- layout ------------------------------------------------------------------------------
    def _build(self) -> None:
        self.open_button = QPushButton("Open dataset…")
        self.open_button.clicked.connect(self.choose_file)
        self.model_box = QComboBox()
        self.model_box.setEditable(True)
        self.model_box.addItem(DEFAULT_MODEL)
        self.model_box.setToolTip("'default' = embedded SmolLM2-135M-Instruct; or a model folder, or a hub id")
        self.model_box.setMinimumWidth(220)
        hint = QLabel("or drop a chat .jsonl file anywhere on the window")
        hint.setStyleSheet("color:#9aa0aa;")
        top = QHBoxLayout()
        for w in (self.open_button, QLabel("Model:"), self.model_box, hint):
            top.addWidget(w)
        top.addStretch(1)
        self.banner = QLabel()
        self.banner.setWordWrap(True)
        self.banner.setToolTip("Click to dismiss")
        self.banner.mousePressEvent = lambda _event: self.banner.hide()
        self.banner.hide()
        self.table = JobTable()
        self.table.job_selected.connect(self.select_job)
        self.loss_chart, self.memory_chart = LossChart(), MemoryChart()
        charts = QSplitter(Qt.Orientation.Vertical)
        charts.addWidget(self.loss_chart)
        charts.addWidget(self.memory_chart)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.table)
        split.addWidget(charts)
        split.setSizes([430, 650])
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
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.banner)
        layout.addWidget(split, 1)
        layout.addLayout(bottom)
        self._update_buttons()

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
        self.banner.setStyleSheet(BANNER_STYLE.get(level, BANNER_STYLE["info"]))
        self.banner.setText(text)
        self.banner.show()

    # --- controller -> view --------------------------------------------------------------------
    def select_job(self, job_id: str) -> None:
        if job_id == self.selected:
            return
        self.selected = job_id
        self.table.select(job_id)
        view = self.controller.jobs[job_id]
        for chart, series, pts in ((self.loss_chart, "loss", view.loss_pts), (self.memory_chart, "RAM", view.ram_pts),
                                   (self.memory_chart, "VRAM", view.vram_pts)):
            chart.set_series(series, [p[0] for p in pts], [p[1] for p in pts])
        self._on_job_changed(job_id)

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
        if job_id == self.selected:
            (self.loss_chart if series == "loss" else self.memory_chart).append(series, x, y)

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
