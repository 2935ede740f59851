"""Experience panel: whether the buffer records (and what that means), answers that need improvement by reason,
corrections waiting for review with Accept / Reject, the teacher's settings, its key (stored, never shown) and today's
budget, and "Correct now". A view: it reads the ExperienceController's snapshot and calls its commands."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.ui.experience.controller import ExperienceController
from app.ui.experience.words import (
    budget_line,
    buffer_headline,
    buffer_sentence,
    correction_preview,
    correction_row,
    entry_row,
    flagged_empty,
    key_words,
    reasons_line,
    teacher_hint,
    waiting_empty,
)
from app.ui.kit import DIM_STYLE, label, make_table, splitter
from widgets.banner import Banner

FLAGGED_COLUMNS = ["Time", "Client", "Why", "State"]
WAITING_COLUMNS = ["#", "Answer", "From", "Score"]
SPINS = {  # teacher setting: (label, minimum, maximum, step, decimals or None for whole numbers, suffix)
    "cooldown_min": ("Cooldown", 0, 10_080, 5, 0, " min"),
    "batch_per_cycle": ("Batch per cycle", 0, 10_000, 1, None, ""),
    "tokens_per_day": ("Tokens per day", 0, 1_000_000_000, 10_000, None, ""),
    "min_score": ("Min score", 0.0, 1.0, 0.05, 2, ""),
}


class ExperiencePanel(QWidget):
    def __init__(self, controller: ExperienceController, parent=None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.selected: int | None = None  # the waiting correction shown in the preview
        self._build()
        controller.changed.connect(self.refresh)
        controller.message.connect(self.show_message)
        controller.busy_changed.connect(self._on_busy)
        controller.correcting_changed.connect(self._on_correcting)
        controller.ran.connect(self._on_ran)
        self.refresh()

    # --- layout ------------------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.banner = Banner()
        split = splitter(Qt.Orientation.Horizontal, (self._flagged_box(), self._waiting_box()), [560, 560],
                         factors=(1, 1))
        layout = QVBoxLayout(self)
        layout.addWidget(self.banner)
        layout.addWidget(self._buffer_box())
        layout.addWidget(split, 1)
        layout.addWidget(self._teacher_box())

    def _buffer_box(self) -> QGroupBox:
        box = QGroupBox("Experience buffer")
        self.headline = QLabel()
        self.headline.setStyleSheet("font-weight:bold;")
        self.headline.setWordWrap(True)
        self.enabled_box = QCheckBox("Record the student's answers")
        self.enabled_box.setToolTip("Off by default. On: the built-in server records each request and its answer")
        self.enabled_box.clicked.connect(self.controller.set_enabled)
        self.review_box = QCheckBox("Review corrections before they train")
        self.review_box.setToolTip("On: a correction that passes validation waits for your Accept before it trains")
        self.review_box.clicked.connect(lambda on: self.controller.set_buffer("require_review", on))
        self.sentence = label(style=DIM_STYLE)
        self.reasons = QLabel()
        self.reasons.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(self.headline, 1)
        top.addWidget(self.enabled_box)
        top.addWidget(self.review_box)
        layout = QVBoxLayout(box)
        layout.addLayout(top)
        layout.addWidget(self.sentence)
        layout.addWidget(self.reasons)
        return box

    def _flagged_box(self) -> QGroupBox:
        box = QGroupBox("Answers that needed improvement")
        self.flagged = make_table(FLAGGED_COLUMNS, striped=False, widest=None)
        self.flagged.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.flagged_empty = label(style=DIM_STYLE)
        self.flagged_empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout = QVBoxLayout(box)
        layout.addWidget(self.flagged_empty)
        layout.addWidget(self.flagged, 1)
        return box

    def _waiting_box(self) -> QGroupBox:
        box = QGroupBox("Corrections waiting for review")
        self.waiting = make_table(WAITING_COLUMNS, striped=False, widest=None)
        self.waiting.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.waiting.itemSelectionChanged.connect(self._on_selected)
        self.waiting_empty = label(style=DIM_STYLE)
        self.waiting_empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.preview = QPlainTextEdit()
        self.preview.setReadOnly(True)
        self.accept_button = QPushButton("Accept")
        self.accept_button.setToolTip("The correction trains in the next cycle")
        self.accept_button.clicked.connect(lambda: self._decide(True))
        self.reject_button = QPushButton("Reject")
        self.reject_button.setToolTip("The correction never trains; the answer waits for another one")
        self.reject_button.clicked.connect(lambda: self._decide(False))
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.accept_button)
        buttons.addWidget(self.reject_button)
        layout = QVBoxLayout(box)
        layout.addWidget(self.waiting_empty)
        layout.addWidget(self.waiting, 1)
        layout.addWidget(self.preview, 1)
        layout.addLayout(buttons)
        return box

    def _teacher_box(self) -> QGroupBox:
        box = QGroupBox("Teacher")
        self.url_edit = QLineEdit()
        self.url_edit.setPlaceholderText("https://api.openai.com/v1 or http://127.0.0.1:8080/v1")
        self.url_edit.editingFinished.connect(lambda: self._apply_text("url", self.url_edit))
        self.model_edit = QLineEdit()
        self.model_edit.setPlaceholderText("the model name the API expects")
        self.model_edit.editingFinished.connect(lambda: self._apply_text("model", self.model_edit))
        left = QFormLayout()
        left.addRow("URL", self.url_edit)
        left.addRow("Model", self.model_edit)
        left.addRow("Limits", self._limits_row())
        left.addRow("Key", self._key_row())
        row = QHBoxLayout(box)
        row.addLayout(left, 3)
        row.addLayout(self._budget_column(), 1)
        return box

    def _limits_row(self) -> QHBoxLayout:
        """One spin box per limit in SPINS, each applied when its editing ends."""
        self.spins: dict[str, QSpinBox | QDoubleSpinBox] = {}
        limits = QHBoxLayout()
        for key, (name, low, high, step, decimals, suffix) in SPINS.items():
            spin = QSpinBox() if decimals is None else QDoubleSpinBox()
            if decimals is not None:
                spin.setDecimals(decimals)
            spin.setRange(low, high)
            spin.setSingleStep(step)
            spin.setSuffix(suffix)
            spin.setGroupSeparatorShown(True)
            spin.editingFinished.connect(lambda key=key: self._apply_spin(key))
            self.spins[key] = spin
            limits.addWidget(QLabel(name))
            limits.addWidget(spin)
        limits.addStretch(1)
        return limits

    def _budget_column(self) -> QVBoxLayout:
        """The budget used, Correct now and what the last correction run did."""
        right = QVBoxLayout()
        self.budget = QLabel()
        self.budget.setStyleSheet("font-weight:bold;")
        self.correct_button = QPushButton("Correct now")
        self.correct_button.setToolTip("Ask the teacher now to re-answer flagged answers (within the batch limit and "
                                       "the budget)")
        self.correct_button.clicked.connect(self.controller.correct_now)
        self.outcome = label(style=DIM_STYLE)
        self.hint = label(style=DIM_STYLE)
        right.addWidget(QLabel("Budget used"))
        right.addWidget(self.budget)
        right.addWidget(self.correct_button)
        right.addWidget(self.outcome)
        right.addWidget(self.hint)
        right.addStretch(1)
        return right

    def _key_row(self) -> QWidget:
        self.key_edit = QLineEdit()
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setPlaceholderText("paste the teacher's API key")
        self.key_edit.returnPressed.connect(self.apply_key)
        self.key_button = QPushButton("Set key…")
        self.key_button.setToolTip("Stored in the OS keyring, or a file only you can read — never in the data dir")
        self.key_button.clicked.connect(self.apply_key)
        self.key_place = label(style=DIM_STYLE)
        self.key_place.setWordWrap(False)
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.key_edit, 1)
        layout.addWidget(self.key_button)
        layout.addWidget(self.key_place, 1)
        return row

    # --- showing the state -------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        snap = self.controller.snapshot
        self.headline.setText(buffer_headline(snap))
        if snap is None:
            self._update_buttons()
            return
        self.enabled_box.setChecked(snap.buffer.enabled)
        self.review_box.setChecked(snap.buffer.require_review)
        self.sentence.setText(buffer_sentence(snap.buffer))
        self.reasons.setText(reasons_line(snap.counts))
        self._show_flagged(snap)
        self._show_waiting(snap)
        self._show_teacher(snap)
        self._update_buttons()

    def _show_flagged(self, snap) -> None:
        rows = snap.flagged
        reviewing = {c["experience_id"] for c in snap.waiting}
        self.flagged.setRowCount(len(rows))
        for r, entry in enumerate(rows):
            for c, text in enumerate(entry_row(entry, reviewing)):
                item = QTableWidgetItem(text)
                if c == 2:
                    item.setToolTip("\n".join(x["text"] for x in entry.get("reasons") or []))
                if c == 0:
                    item.setToolTip(entry["id"])
                self.flagged.setItem(r, c, item)
        self.flagged.setVisible(bool(rows))
        self.flagged_empty.setVisible(not rows)
        self.flagged_empty.setText("" if rows else flagged_empty(snap))

    def _show_waiting(self, snap) -> None:
        ids = [c["id"] for c in snap.waiting]
        self.waiting.blockSignals(True)
        self.waiting.setRowCount(len(ids))
        for r, correction in enumerate(snap.waiting):
            for c, text in enumerate(correction_row(correction)):
                self.waiting.setItem(r, c, QTableWidgetItem(text))
        if self.selected in ids:
            self.waiting.selectRow(ids.index(self.selected))
        else:
            self.selected = None
            self.waiting.clearSelection()
        self.waiting.blockSignals(False)
        self.waiting.setVisible(bool(ids))
        self.preview.setVisible(bool(ids))
        self.preview.setPlainText(correction_preview(self.controller.waiting_correction(self.selected)))
        self.waiting_empty.setVisible(not ids)
        self.waiting_empty.setText("" if ids else waiting_empty(snap))

    def _show_teacher(self, snap) -> None:
        """The stored values, except in an editor the person is typing in (not applied yet)."""
        cfg = snap.teacher
        for key, edit in (("url", self.url_edit), ("model", self.model_edit)):
            if not edit.isModified() and not edit.hasFocus():
                edit.setText(getattr(cfg, key))
        for key, spin in self.spins.items():
            if not spin.hasFocus():
                spin.blockSignals(True)
                spin.setValue(getattr(cfg, key))
                spin.blockSignals(False)
        self.key_place.setText(key_words(self.controller.key_place))
        self.budget.setText(budget_line(snap.usage, cfg))
        self.hint.setText(teacher_hint(cfg, self.controller.key_place))
        self.hint.setVisible(bool(self.hint.text()))
        self.outcome.setText(self.controller.last_run or "")

    def _on_selected(self) -> None:
        rows = self.waiting.selectionModel().selectedRows()
        self.selected = int(self.waiting.item(rows[0].row(), 0).text()) if rows else None
        self.preview.setPlainText(correction_preview(self.controller.waiting_correction(self.selected)))
        self._update_buttons()

    def _update_buttons(self) -> None:
        c = self.controller
        chosen = self.selected is not None and not c.busy
        self.accept_button.setEnabled(chosen)
        self.reject_button.setEnabled(chosen)
        self.correct_button.setEnabled(c.snapshot is not None and not c.correcting)
        self.correct_button.setText("Correcting…" if c.correcting else "Correct now")
        self.key_button.setEnabled(not c.busy)

    def _on_busy(self, _busy: bool) -> None:
        self._update_buttons()

    def _on_correcting(self, _on: bool) -> None:
        self._update_buttons()

    def _on_ran(self, text: str) -> None:
        self.outcome.setText(text)

    # --- commands ----------------------------------------------------------------------------------------------------
    def _decide(self, accept: bool) -> None:
        if self.selected is not None:
            self.controller.decide(self.selected, accept)

    def _apply_text(self, key: str, edit: QLineEdit) -> None:
        edit.setModified(False)
        self.controller.set_teacher(key, edit.text().strip())

    def _apply_spin(self, key: str) -> None:
        self.controller.set_teacher(key, self.spins[key].value())

    def apply_key(self) -> None:
        key = self.key_edit.text().strip()
        self.key_edit.clear()  # the key leaves the widget at once
        if not key:
            self.show_message("error", "Paste the teacher's API key in the field first.")
            return
        self.controller.set_key(key)

    def show_message(self, level: str, text: str) -> None:
        self.banner.show_message(level, text)
