"""School panel (the first tab): the student, progress to the next cycle, the running cycle's stages with progress and
ETA, held-out agreement / validity / loss over cycles and the blind test's figure (charts), the last report
card, the policy, and the buttons Run now / Pause / Approve / Refuse. A view: it reads the SchoolController's state
and calls its commands."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.judge.report import METRICS
from app.core.runtime.school.cycles import STAGES
from app.core.train.backends import BACKENDS
from app.ui.school.charts import blind_lines
from app.ui.kit import DIM_STYLE, local_time, splitter
from app.ui.school.controller import SchoolController
from app.ui.school.charts import SchoolCharts
from app.ui.school.words import (
    TEAM_RUNS,
    card_reason,
    cycle_headline,
    gguf_lines,
    last_card,
    next_state,
    progress_words,
    reward_part_lines,
    stage_marks,
    student_lines,
    team_line,
    verdict_lines,
)
from widgets.banner import Banner
from widgets.report_card import ReportCardView
from widgets.stage_row import StageRow

ROWS = [(key, words, better) for key, (words, better) in METRICS.items()]
HISTORY_COLUMNS = ["Cycle", "State", "Stage", "Started", "Summary"]
RUN_TIP = "Start a cycle now (skips the session count, the window and the cool-down)"
TEAM_STYLE = "font-weight:bold;color:#a29bfe;"
STATE_COLOURS = {"done": "#2ecc71", "refused": "#ff9f43", "failed": "#ff6b6b", "running": "#4f8cff",
                 "approval": "#feca57"}


class SchoolPanel(QWidget):
    def __init__(self, controller: SchoolController, parent=None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.selected_cycle: int | None = None  # the history row whose card is shown (None: the newest ended)
        self._build()
        controller.changed.connect(self.refresh)
        controller.progress.connect(self._on_progress)
        controller.message.connect(self.show_message)
        controller.busy_changed.connect(self._on_busy)  # bound methods (not lambdas): no leak after the window
        if controller.link is not None:
            controller.link.connection.connect(self._on_connection)
        self.refresh()

    # --- layout ----------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.banner = Banner()
        top = QHBoxLayout()
        top.addWidget(self._student_box(), 3)
        top.addWidget(self._next_box(), 3)
        top.addWidget(self._policy_box(), 2)
        charts = self._charts_and_history()
        card_box = QGroupBox("Report card")
        self.card = ReportCardView()
        QVBoxLayout(card_box).addWidget(self.card)
        split = splitter(Qt.Orientation.Horizontal, (charts, card_box), [640, 480], factors=(3, 2))
        self.footer = QLabel()
        self.footer.setStyleSheet(DIM_STYLE)
        self.footer.setWordWrap(True)
        self.team_line = QLabel()  # a member's window: the team school it belongs to
        self.team_line.setStyleSheet(TEAM_STYLE)
        self.team_line.setWordWrap(True)
        self.team_line.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.team_line.hide()
        layout = QVBoxLayout(self)
        layout.addWidget(self.banner)
        layout.addWidget(self.team_line)
        layout.addLayout(top)
        layout.addWidget(self._cycle_box())
        layout.addWidget(split, 1)
        layout.addWidget(self.footer)

    def _student_box(self) -> QGroupBox:
        box = QGroupBox("Student")
        self.student = QLabel()
        self.student.setWordWrap(True)
        self.student.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.student.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        QVBoxLayout(box).addWidget(self.student)
        return box

    def _next_box(self) -> QGroupBox:
        box = QGroupBox("Next cycle")
        self.sessions = QProgressBar()
        self.sessions.setTextVisible(True)
        self.next_lines = QLabel()
        self.next_lines.setWordWrap(True)
        self.next_lines.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        layout = QVBoxLayout(box)
        layout.addWidget(self.sessions)
        layout.addWidget(self.next_lines, 1)
        return box

    def _policy_box(self) -> QGroupBox:
        box = QGroupBox("Policy")
        self.deploy_box = QComboBox()
        self.deploy_box.addItems(["auto", "ask", "never"])
        self.deploy_box.setToolTip("What happens with a model that passes the gate: deployed at once (auto), after "
                                   "your approval (ask), or never")
        self.deploy_box.activated.connect(lambda _i: self.controller.set_policy("deploy",
                                                                                self.deploy_box.currentText()))
        self.min_sessions = QSpinBox()
        self.min_sessions.setRange(0, 100_000)
        self.min_sessions.setToolTip("New usable sessions since the last cycle before the next one starts")
        self.min_sessions.editingFinished.connect(self.apply_min_sessions)
        self.window_edit = QLineEdit()
        self.window_edit.setPlaceholderText("02:00-06:00 or any")
        self.window_edit.setToolTip("Local time a cycle may start in (HH:MM-HH:MM, may wrap midnight) or 'any'")
        self.window_edit.editingFinished.connect(self.apply_window)
        self.train_on_box = QComboBox()
        self.train_on_box.addItems(["default", *BACKENDS])
        self.train_on_box.setToolTip("Where a cycle's training runs: here (local), a Ray cluster, a SkyPilot managed "
                                     "job, or default: the queue's setting (nightschool queue remote backend)")
        self.train_on_box.activated.connect(lambda _i: self.controller.set_policy("train_on",
                                                                                  self.train_on_box.currentText()))
        form = QFormLayout(box)
        form.addRow("Deploy", self.deploy_box)
        form.addRow("Min sessions", self.min_sessions)
        form.addRow("Window", self.window_edit)
        form.addRow("Train on", self.train_on_box)
        return box

    def _cycle_box(self) -> QGroupBox:
        box = QGroupBox("Cycle")
        self.headline = QLabel()
        self.headline.setStyleSheet("font-weight:bold;")
        self.headline.setWordWrap(True)
        self.stages = StageRow(STAGES)
        self.progress = QProgressBar()
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(10)
        self.progress_text = QLabel()
        self.progress_text.setStyleSheet(DIM_STYLE)
        self.run_button = QPushButton("Run now")
        self.run_button.setToolTip(RUN_TIP)
        self.run_button.clicked.connect(self.controller.run_now)
        self.pause_button = QPushButton("Pause learning")
        self.pause_button.clicked.connect(self.controller.toggle_pause)
        self.approve_button = QPushButton("Approve deployment")
        self.approve_button.clicked.connect(lambda: self.controller.decide(True))
        self.refuse_button = QPushButton("Refuse")
        self.refuse_button.clicked.connect(lambda: self.controller.decide(False))
        buttons = QHBoxLayout()
        for button in (self.run_button, self.pause_button, self.approve_button, self.refuse_button):
            buttons.addWidget(button)
        grid = QGridLayout(box)
        grid.addWidget(self.headline, 0, 0)
        grid.addLayout(buttons, 0, 1, Qt.AlignmentFlag.AlignRight)
        grid.addWidget(self.stages, 1, 0, 1, 2)
        row = QHBoxLayout()
        row.addWidget(self.progress, 1)
        row.addWidget(self.progress_text, 1)
        grid.addLayout(row, 2, 0, 1, 2)
        grid.setColumnStretch(0, 1)
        return box

    def _charts_and_history(self) -> QWidget:
        self.charts = SchoolCharts()
        self.scores_chart, self.loss_chart, self.blind_chart = (self.charts.scores_chart, self.charts.loss_chart,
                                                                self.charts.blind_chart)
        self.history = QTableWidget(0, len(HISTORY_COLUMNS))
        self.history.setHorizontalHeaderLabels(HISTORY_COLUMNS)
        self.history.verticalHeader().hide()
        self.history.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.history.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.history.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.history.setWordWrap(False)
        header = self.history.horizontalHeader()
        for c in range(len(HISTORY_COLUMNS) - 1):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.history.itemSelectionChanged.connect(self._on_history_selected)
        self.history_empty = QLabel()
        self.history_empty.setStyleSheet(DIM_STYLE)
        self.history_empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        side = QWidget()
        layout = QVBoxLayout(side)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.charts, 3)
        layout.addWidget(self.history_empty)
        layout.addWidget(self.history, 2)
        side.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        return side

    # --- showing the state ---------------------------------------------------------------------------------
    def refresh(self) -> None:
        c = self.controller
        status, history = c.status, c.history
        self.student.setText("\n".join(student_lines(status, history)))
        new, needed, lines = next_state(status)
        self.sessions.setRange(0, max(needed, 1))
        self.sessions.setValue(min(new, max(needed, 1)))
        self.sessions.setFormat(f"sessions {new}/{needed}" if status is not None else "…")
        self.next_lines.setText("\n".join(lines))
        self._show_policy((status or {}).get("policy") or {})
        self.headline.setText(cycle_headline(status, history))
        current, done, how = stage_marks(status, history)
        self.stages.set_state(current, done, how)
        running = ((status or {}).get("cycle") or {}).get("state") == "running"
        self.progress.setVisible(running)
        self.progress_text.setVisible(running)
        if running:
            self._on_progress(c.last_progress)
        self.charts.show_state(history, (status or {}).get("blind") or [])
        self._show_history(history)
        self._show_card(status, history)
        self._show_footer()
        self._show_team()
        self._update_buttons()

    def _show_team(self) -> None:
        team = self.controller.team
        self.team_line.setVisible(self.controller.team_member)
        if self.controller.team_member:
            self.team_line.setText(team_line(team.view, team.offline_since))

    def _on_busy(self, _busy: bool) -> None:
        self._update_buttons()

    def _on_connection(self, _connected: bool, _words: str) -> None:
        self._show_footer()

    def _show_footer(self) -> None:
        link = self.controller.link
        self.footer.setText(link.describe() if link is not None else "")

    def _show_policy(self, policy: dict) -> None:
        """The stored values, except in an editor the person is typing in (not applied yet)."""
        if not policy:
            return
        self.deploy_box.setCurrentText(policy.get("deploy", "auto"))
        self.train_on_box.setCurrentText(policy.get("train_on", "default"))
        if not self.min_sessions.lineEdit().isModified():
            self.min_sessions.blockSignals(True)
            self.min_sessions.setValue(int(policy.get("min_sessions", 0)))
            self.min_sessions.blockSignals(False)
        if not self.window_edit.isModified():
            self.window_edit.setText(str(policy.get("window", "")))

    def _on_progress(self, event: dict | None) -> None:
        step, total, words = progress_words(event)
        if total:
            self.progress.setRange(0, total)
            self.progress.setValue(min(step, total))
        else:
            self.progress.setRange(0, 0)  # busy: no count yet
        self.progress_text.setText(words or "starting…")

    def _show_history(self, history: list[dict]) -> None:
        shown = [c["id"] for c in history]
        self.history.blockSignals(True)
        self.history.setRowCount(len(history))
        for r, cycle in enumerate(history):
            summary = (cycle.get("report") or {}).get("summary") or cycle.get("reason") or cycle.get("trigger") or ""
            values = [str(cycle["id"]), cycle["state"], cycle["stage"],
                      local_time(cycle.get("started_at"), "%d %b %H:%M"), summary]
            for c, text in enumerate(values):
                item = QTableWidgetItem(text)
                if c == 1:
                    item.setForeground(QBrush(QColor(STATE_COLOURS.get(cycle["state"], "#e4e6eb"))))
                if c == 4:
                    item.setToolTip(summary)
                self.history.setItem(r, c, item)
        if self.selected_cycle in shown:
            self.history.selectRow(shown.index(self.selected_cycle))
        else:
            self.selected_cycle = None
            self.history.clearSelection()
        self.history.blockSignals(False)
        self.history.setVisible(bool(history))
        self.history_empty.setVisible(not history)
        self.history_empty.setText("" if history else "Cycles are listed here as they run.")

    def _show_card(self, status: dict | None, history: list[dict]) -> None:
        if self.selected_cycle is not None:
            cycle = next((c for c in history if c["id"] == self.selected_cycle), None)
            card = (cycle or {}).get("report") or {}
        else:
            cycle, card = last_card(status, history)
        if cycle is None:
            self.card.set_empty("A report card appears here when a cycle ends: what it learned from, its held-out "
                                "scores against the base and the previous model, the gate's verdict, and examples "
                                "it gained or lost." if status is not None else "Reading the school…")
            return
        if not card:
            self.card.set_empty(f"Cycle {cycle['id']} is {cycle['state']}: its report card comes when it ends.")
            self.card.title.setText(f"Cycle {cycle['id']}")
            return
        ended = {"done": "finished", "refused": "refused", "failed": "failed"}.get(cycle["state"], cycle["state"])
        reasons = verdict_lines(card) + reward_part_lines(card) + gguf_lines(card) + blind_lines(card)
        shown = {**card, "reasons": reasons}
        self.card.set_card(f"Cycle {cycle['id']} — {ended}", shown, ROWS, ended=cycle["state"],
                           reason=card_reason(card, cycle.get("reason") or ""))

    def _on_history_selected(self) -> None:
        rows = self.history.selectionModel().selectedRows()
        self.selected_cycle = int(self.history.item(rows[0].row(), 0).text()) if rows else None
        self._show_card(self.controller.status, self.controller.history)

    def _update_buttons(self) -> None:
        c = self.controller
        known = c.status is not None
        self.run_button.setEnabled(known and not c.busy and not c.paused and (c.status or {}).get("cycle") is None)
        self.pause_button.setEnabled(known and not c.busy)
        self.pause_button.setText("Resume learning" if c.paused else "Pause learning")
        waiting = c.awaiting_approval() is not None
        self.approve_button.setEnabled(waiting and not c.busy)
        self.refuse_button.setEnabled(waiting and not c.busy)
        member = c.team_member  # the team's cycles are run and approved on its server, not from here
        if member:
            for off in (self.run_button, self.approve_button, self.refuse_button):
                off.setEnabled(False)
        self.run_button.setToolTip(f"Not here: {TEAM_RUNS}" if member else RUN_TIP)
        for decision in (self.approve_button, self.refuse_button):
            decision.setToolTip(f"Not here: {TEAM_RUNS}" if member else "")

    # --- policy editors ------------------------------------------------------------------------------------
    def apply_min_sessions(self) -> None:
        self.min_sessions.lineEdit().setModified(False)
        self.controller.set_policy("min_sessions", self.min_sessions.value())

    def apply_window(self) -> None:
        self.window_edit.setModified(False)  # the next read shows the stored value (the old one if refused)
        text = self.window_edit.text().strip()
        if text:
            self.controller.set_policy("window", text)

    def show_message(self, level: str, text: str) -> None:
        self.banner.show_message(level, text)

