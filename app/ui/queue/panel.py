"""Queue panel: the queue in run order (drag waiting rows to reorder, a priority combo per row), what to add dropped
files as, per-job buttons (pause/resume, stop, cancel, retry, to top) and the queue-wide pause and concurrency."""
from __future__ import annotations

from html import escape
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMenu,
    QMessageBox,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.train.spec import DEFAULT_MODEL
from app.ui.kit import DIM_STYLE
from app.ui.queue.controller import ENGINE, PRIORITIES, RECIPES, RETRYABLE, WAITING, QueueController
from widgets.banner import Banner
from widgets.job_table import format_eta
from widgets.queue_table import QueueRow, QueueTable

MAX_CONCURRENT = 8
HINT = "Select a job to act on it. Drag a waiting row to reorder the queue."


def set_text(widget, text: str) -> None:
    """Only when it changed (see app.ui.queue.controller: every Qt setter call costs a reference to None under
    PySide6 6.12)."""
    if widget.text() != text:
        widget.setText(text)


def set_tip(widget, text: str) -> None:
    if widget.toolTip() != text:
        widget.setToolTip(text)


def set_enabled(widget, enabled: bool) -> None:
    if widget.isEnabled() != enabled:
        widget.setEnabled(enabled)


def timing(entry, paused: bool) -> str:
    """ETA for a running job, start time and duration for a waiting one."""
    if entry.place is None:
        return ""
    takes = f" · takes ~{format_eta(entry.eta_s)}" if entry.eta_s is not None else ""
    if entry.state == "paused":
        return "paused" + (f" · ~{format_eta(entry.eta_s)} left" if entry.eta_s is not None else "")
    if entry.state == "starting":
        return "starting…"
    if entry.state in ENGINE or entry.job.state in ("running", "starting"):
        if entry.phase and entry.phase != "train":
            return {"load_model": "loading the model…", "materialise": "preparing the model…"}.get(entry.phase,
                                                                                                   entry.phase)
        return f"~{format_eta(entry.eta_s)} left" if entry.eta_s is not None else "estimating…"
    if entry.state == "held":
        return "held — Resume to queue it" + takes
    if paused or entry.starts_in_s is None:
        return "waits: queue paused" + takes if paused else "waits" + takes
    start = "starts next" if entry.starts_in_s < 1 else f"starts in ~{format_eta(entry.starts_in_s)}"
    return start + takes


def to_row(entry, paused: bool) -> QueueRow:
    job = entry.job
    model = Path(job.model_ref).name if "/" in job.model_ref else job.model_ref
    return QueueRow(job_id=job.id, place=entry.place, recipe=job.kind, priority=job.priority, state=entry.state,
                    step=entry.step, total=entry.total, timing=timing(entry, paused),
                    source=job.source + (f" · on {entry.on}" if entry.on != "local" else ""),
                    data=f"{Path(job.dataset_path).name} · {job.records} records · {model}",
                    error=job.error if job.error else None, waiting=entry.state in WAITING)


class QueuePanel(QWidget):
    """The view; it subscribes to a QueueController and never touches the store or engines."""

    def __init__(self, controller: QueueController, parent=None) -> None:
        super().__init__(parent)
        self.controller = controller
        self._build()
        controller.entries_changed.connect(self._on_entries)
        controller.settings_changed.connect(self._on_settings)
        controller.message.connect(self.show_message)
        self._on_entries(controller.entries)
        self._on_settings(controller.paused, controller.max_concurrent)

    # --- layout --------------------------------------------------------------------------------------
    def _build(self) -> None:
        top = self._top_bar()
        self.banner = Banner()
        self.table = self._queue_table()
        bottom = self._job_bar()
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.banner)
        layout.addWidget(self.table, 1)
        layout.addLayout(bottom)
        self._update_buttons()

    def _top_bar(self) -> QHBoxLayout:
        """What a file added here becomes (recipe, priority, model, Add file…), then the queue's own controls."""
        self.recipe_box = QComboBox()
        self.recipe_box.addItems(RECIPES)
        self.recipe_box.setToolTip("Recipe for added files; on sft, a preference file (prompt/chosen/rejected) "
                                   "is trained with dpo")
        self.priority_box = QComboBox()
        self.priority_box.addItems(PRIORITIES)
        self.priority_box.setCurrentText("normal")
        self.model_box = QComboBox()
        self.model_box.setEditable(True)
        self.model_box.addItem(DEFAULT_MODEL)
        self.model_box.setMinimumWidth(180)
        self.model_box.setToolTip("'default' = embedded SmolLM2-135M-Instruct; or a model folder, or a hub id")
        self.add_button = QPushButton("Add file…")
        self.add_button.clicked.connect(self.choose_files)
        hint = QLabel("or drop .jsonl files on this tab")
        hint.setStyleSheet(DIM_STYLE)
        self.queue_button = QPushButton("Pause queue")
        self.queue_button.clicked.connect(self._toggle_queue)
        self.concurrent = QSpinBox()
        self.concurrent.setRange(1, MAX_CONCURRENT)
        self.concurrent.setToolTip("How many jobs train at the same time (each has its own engine process)")
        self.concurrent.valueChanged.connect(self.controller.set_max_concurrent)
        self.queue_state = QLabel()
        top = QHBoxLayout()
        for w in (QLabel("Recipe"), self.recipe_box, QLabel("Priority"), self.priority_box, QLabel("Model"),
                  self.model_box, self.add_button, hint):
            top.addWidget(w)
        top.addStretch(1)
        for w in (self.queue_state, self.queue_button, QLabel("Jobs at once"), self.concurrent):
            top.addWidget(w)
        return top

    def _queue_table(self) -> QueueTable:
        table = QueueTable()
        table.job_selected.connect(self._on_selected)
        table.move_requested.connect(self.controller.move)
        table.priority_requested.connect(self.controller.set_priority)
        table.customContextMenuRequested.connect(self._context_menu)
        return table

    def _job_bar(self) -> QHBoxLayout:
        """The selected job's detail and the buttons that act on it."""
        self.detail = QLabel(HINT)
        self.detail.setWordWrap(True)
        self.detail.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.pause_button, self.resume_button, self.stop_button = (QPushButton(t) for t in ("Pause", "Resume", "Stop"))
        self.cancel_button, self.retry_button, self.top_button = (QPushButton(t) for t in
                                                                  ("Cancel…", "Retry", "To top"))
        self.stop_button.setToolTip("A running job saves a checkpoint and its adapter, then ends as stopped")
        self.cancel_button.setToolTip("End the job now; its checkpoints are kept (Retry resumes from the last one)")
        self.retry_button.setToolTip("Queue a failed, stopped or cancelled job again; it resumes from its last "
                                     "checkpoint")
        for button, action in self._actions().items():
            button.clicked.connect(action)
        bottom = QHBoxLayout()
        bottom.addWidget(self.detail, 1)
        for button in self._actions():
            bottom.addWidget(button)
        return bottom

    def _actions(self) -> dict:
        """Each button and what it does to the selected job."""
        c = self.controller
        return {self.pause_button: self._for_selection(c.pause), self.resume_button: self._for_selection(c.resume),
                self.stop_button: self._for_selection(c.stop_job), self.cancel_button: self.cancel,
                self.retry_button: self._for_selection(c.retry), self.top_button: self._for_selection(c.to_top)}

    def _for_selection(self, action):
        def act() -> None:
            if job := self.selected():
                action(job)
        return act

    # --- user actions --------------------------------------------------------------------------------
    def choose_files(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, "Queue training files", "", "JSONL (*.jsonl);;All (*)")
        if files:
            self.add_files(files)

    def add_files(self, paths: list[str]) -> None:
        """Queue files with the chosen recipe, priority and model (checked on a thread; refusals shown here)."""
        files = [p for p in paths if Path(p).is_file()]
        if len(files) < len(paths):
            self.show_message("error", "Folders are not queued: drop .jsonl training files (chat `messages`, or "
                                       "`prompt`/`chosen`/`rejected` pairs). The Capture tab imports folders.")
        if files:
            self.controller.add(files, kind=self.recipe_box.currentText(), priority=self.priority_box.currentText(),
                                model=self.model_box.currentText().strip() or DEFAULT_MODEL)

    def selected(self) -> str | None:
        return self.table.selected_id()

    def cancel(self) -> None:
        job = self.selected()
        if job and self.confirm("Cancel job", f"Cancel job {job}?\n\nA running engine is ended now, without saving "
                                              "a new checkpoint. The checkpoints it has are kept: Retry resumes "
                                              "from the last one."):
            self.controller.cancel(job)

    def confirm(self, title: str, text: str) -> bool:
        answer = QMessageBox.question(self, title, text)
        return answer == QMessageBox.StandardButton.Yes

    def _toggle_queue(self) -> None:
        if self.controller.paused:
            self.controller.resume()
        else:
            self.controller.pause()

    def _context_menu(self, pos) -> None:
        index = self.table.indexAt(pos)
        if not index.isValid():
            return
        self.table.selectRow(index.row())
        menu = QMenu(self)
        row = self.table.row(self.selected())
        if row is not None and row.waiting:
            sub = menu.addMenu("Priority")
            for priority in PRIORITIES:
                act = sub.addAction(priority)
                act.setCheckable(True)
                act.setChecked(priority == row.priority)
                act.triggered.connect(lambda _=False, p=priority, j=row.job_id: self.controller.set_priority(j, p))
        for button, action in self._actions().items():
            act = menu.addAction(button.text())
            act.setEnabled(button.isEnabled())
            act.triggered.connect(action)
        menu.popup(self.table.viewport().mapToGlobal(pos))

    def show_message(self, level: str, text: str) -> None:
        self.banner.show_message(level, text)

    # --- controller -> view ----------------------------------------------------------------------------
    def _on_entries(self, entries: list) -> None:
        paused = self.controller.paused
        self.table.set_rows([to_row(e, paused) for e in entries])
        self._update_buttons()
        self._describe()

    def _on_settings(self, paused: bool, max_concurrent: int) -> None:
        set_text(self.queue_button, "Resume queue" if paused else "Pause queue")
        set_tip(self.queue_button, "Start queued jobs again" if paused else "Nothing new starts; running jobs go on")
        set_text(self.queue_state, "<b style='color:#ff9f43'>Queue paused</b>" if paused else "Queue running")
        if self.controller.pending == 0 and not self.concurrent.hasFocus() \
                and self.concurrent.value() != max_concurrent:
            self.concurrent.blockSignals(True)  # a change of ours in flight must not be undone by an older read
            self.concurrent.setValue(max_concurrent)
            self.concurrent.blockSignals(False)

    def _on_selected(self, _job_id) -> None:
        self._update_buttons()
        self._describe()

    def _describe(self) -> None:
        entry = self.controller.entry(self.selected()) if self.selected() else None
        if entry is None:
            set_text(self.detail, HINT)
            return
        job = entry.job
        text = (f"<b>{escape(job.id)}</b> — {escape(entry.state)} · {escape(job.kind)} · {escape(job.priority)} "
                f"priority · {job.records} records from {escape(job.dataset_path)} · model {escape(job.model_ref)}")
        if job.error:
            colour = "#ff8a8a" if entry.state == "failed" else "#9aa0aa"
            text += f"<br><span style='color:{colour}'>{escape(job.error).replace(chr(10), '<br>')}</span>"
        set_text(self.detail, text)

    def _update_buttons(self) -> None:
        entry = self.controller.entry(self.selected()) if self.selected() else None
        state = entry.state if entry else None
        set_enabled(self.pause_button, state in ("running", "queued"))
        set_tip(self.pause_button, "Hold it: it does not start until resumed" if state == "queued" else
                "Pause its engine between steps")
        set_enabled(self.resume_button, state in ("paused", "held"))
        set_enabled(self.stop_button, state in (*ENGINE, *WAITING))
        set_enabled(self.cancel_button, state in (*ENGINE, *WAITING))
        set_enabled(self.retry_button, state in RETRYABLE)
        first_waiting = next((e.job.id for e in self.controller.entries if e.state in WAITING), None)
        set_enabled(self.top_button, state in WAITING and first_waiting != entry.job.id)
