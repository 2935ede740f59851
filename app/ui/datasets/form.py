"""Datasets build form: base model, mode, length, filters, replay → BuildConfig; Build, Cancel, progress."""
from __future__ import annotations

from PySide6.QtCore import QRegularExpression, Qt, Signal
from PySide6.QtGui import QRegularExpressionValidator
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.datasets.config import MODES as BUILD_MODES, BuildConfig, Filters
from app.ui.datasets.controller import DatasetsController
from app.ui.kit import FAINT

PHASES = {"load": "Loading sessions", "render": "Rendering examples", "write": "Writing files"}
MODES = {"auto": "incremental when this base model already has a dataset, else full",
         "full": "every eligible session", "incremental": "only sessions no earlier dataset of this base model used, "
                                                          "plus a replayed share of earlier examples"}
DEFAULT_BASE_MODEL = BuildConfig.model_fields["base_model"].default
NAME_RULE = r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}"  # the name becomes a folder name


def spin(low: int, high: int, value: int, suffix: str = "", tip: str = "") -> QSpinBox:
    box = QSpinBox()
    box.setRange(low, high)
    box.setValue(value)
    box.setSuffix(suffix)
    box.setToolTip(tip)
    return box


def check(text: str, on: bool, tip: str) -> QCheckBox:
    box = QCheckBox(text)
    box.setChecked(on)
    box.setToolTip(tip)
    return box


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = int(round(seconds))
    return "< 1 s" if seconds < 1 else f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"


class BuildForm(QGroupBox):
    """The settings of a build; Build asks the controller, whose signals drive the progress bar."""

    problem = Signal(str)  # settings that do not make a valid BuildConfig

    def __init__(self, controller: DatasetsController, parent=None) -> None:
        super().__init__("Build a dataset from the captured sessions", parent)
        self.controller = controller
        grid = QGridLayout(self)
        grid.setColumnStretch(1, 1)
        grid.setColumnStretch(3, 1)
        self._fields()
        pairs = [("Name", self.name_edit), ("Base model", self._model_row()), ("Mode", self.mode),
                 ("Max length", self.max_length), ("Replay", self.replay), ("Near-duplicate ≥", self.near_dup),
                 ("Min tool calls", self.min_tools), ("Min steps", self.min_steps)]
        place(grid, pairs)
        for i, box in enumerate((self.drop_abandoned, self.drop_errored, self.require_recovery, self.subagents)):
            grid.addWidget(box, 5 + i // 2, (i % 2) * 2, 1, 2)
        grid.addLayout(self._actions(), 7, 0, 1, 4)
        grid.setRowStretch(8, 1)
        controller.building.connect(self.set_building)
        controller.progress.connect(self.on_progress)
        controller.log.connect(self.phase.setText)

    def _fields(self) -> None:
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("automatic: sft-<date>-<time>")
        self.name_edit.setValidator(QRegularExpressionValidator(QRegularExpression(NAME_RULE)))
        d = BuildConfig()  # the initial values: a build with the defaults
        self.mode = QComboBox()
        for i, mode in enumerate(BUILD_MODES):
            self.mode.addItem(mode)
            self.mode.setItemData(i, MODES[mode], Qt.ItemDataRole.ToolTipRole)
        self.mode.setCurrentText(d.mode)
        self.max_length = spin(64, 131_072, d.max_length, " tokens",
                               "longer conversations are cut into windows of whole turns")
        self.replay = spin(0, 90, round(d.replay * 100), " %", "incremental builds: share of the new train split "
                                                               "replayed from earlier datasets, so the model does "
                                                               "not forget")
        self.near_dup = QDoubleSpinBox()
        self.near_dup.setRange(0.0, 1.0)
        self.near_dup.setSingleStep(0.05)
        self.near_dup.setValue(d.filters.near_duplicate)
        self.near_dup.setSpecialValueText("off")
        self.near_dup.setToolTip("sessions this similar (MinHash Jaccard) to a kept one are dropped; 0 = off")
        f = d.filters
        self.min_tools = spin(0, 1000, f.min_tool_calls, tip="sessions with fewer tool calls are dropped")
        self.min_steps = spin(0, 1000, f.min_steps, tip="sessions with fewer assistant messages are dropped")
        self.drop_abandoned = check("Drop abandoned", f.drop_abandoned, "drop interrupted sessions whole (ended on a "
                                                                        "request, a pending call or an unanswered "
                                                                        "result); unchecked, their completed turns "
                                                                        "are kept and the unfinished tail dropped")
        self.drop_errored = check("Drop errored", f.drop_errored, "drop sessions that ended on a failed tool call")
        self.require_recovery = check("Require recovery", f.require_recovery, "keep only sessions where an error was "
                                                                              "followed by a successful retry")
        self.subagents = check("Include sub-agents", f.include_subagents,
                               "sub-agent sessions become examples of their own")

    def _model_row(self) -> QHBoxLayout:
        self.model_edit = QLineEdit(DEFAULT_BASE_MODEL)
        self.model_edit.setToolTip("'default' = the embedded SmolLM2-135M-Instruct, or a model folder: its tokenizer "
                                   "and chat template render the examples")
        browse = QPushButton("Folder…")
        browse.clicked.connect(self._choose_model)
        row = QHBoxLayout()
        row.addWidget(self.model_edit, 1)
        row.addWidget(browse)
        return row

    def _actions(self) -> QVBoxLayout:
        self.sessions_label = QLabel()
        self.sessions_label.setStyleSheet(f"color:{FAINT};")
        self.build_button = QPushButton("Build dataset")
        self.build_button.setDefault(True)
        self.build_button.clicked.connect(self.start_build)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.controller.cancel)
        self.progress_bar = QProgressBar()
        self.progress_bar.setFormat("%v / %m")
        self.phase = QLabel()
        self.phase.setStyleSheet(f"color:{FAINT};")
        self.phase.setWordWrap(True)
        for w in (self.cancel_button, self.progress_bar, self.phase):
            w.hide()
        row = QHBoxLayout()
        row.addWidget(self.sessions_label, 1)
        row.addWidget(self.cancel_button)
        row.addWidget(self.build_button)
        col = QVBoxLayout()
        col.addLayout(row)
        col.addWidget(self.progress_bar)
        col.addWidget(self.phase)
        return col

    # --- settings → config -------------------------------------------------------------------------
    def config(self) -> BuildConfig:
        filters = Filters(drop_abandoned=self.drop_abandoned.isChecked(), drop_errored=self.drop_errored.isChecked(),
                          min_tool_calls=self.min_tools.value(), min_steps=self.min_steps.value(),
                          require_recovery=self.require_recovery.isChecked(), near_duplicate=self.near_dup.value(),
                          include_subagents=self.subagents.isChecked())
        return BuildConfig(name=self.name_edit.text().strip() or None,
                           base_model=self.model_edit.text().strip() or DEFAULT_BASE_MODEL,
                           mode=self.mode.currentText(), max_length=self.max_length.value(),
                           replay=self.replay.value() / 100, filters=filters)

    def start_build(self) -> None:
        try:
            config = self.config()
        except ValueError as exc:
            self.problem.emit(f"The build settings are not valid: {exc}")
            return
        self.controller.build(config)

    def set_sessions(self, tasks: int, subagents: int = 0) -> None:
        """Tasks as the Capture tab counts them; their sub-agents' sessions, which a build also takes, said apart."""
        text = f"{tasks:,} captured session{'s' * (tasks != 1)} to build from"
        if subagents:
            text += f" (and {subagents:,} sub-agent session{'s' * (subagents != 1)} of theirs)"
        self.sessions_label.setText(text)

    # --- controller → form -------------------------------------------------------------------------
    def set_building(self, on: bool) -> None:
        """While building the settings are locked, Cancel and the progress bar show; Build comes back after."""
        keep = (self.cancel_button, self.progress_bar, self.phase, self.sessions_label)
        for w in self.findChildren(QWidget):
            if w not in keep:
                w.setEnabled(not on)
        for w in (self.cancel_button, self.progress_bar, self.phase):
            w.setVisible(on)
        if on:
            self.progress_bar.setRange(0, 0)  # busy until the first progress event
            self.phase.setText("Starting the dataset worker…")

    def on_progress(self, phase: str, step: int, total: int, eta: float | None) -> None:
        self.progress_bar.setRange(0, max(total, 1))
        self.progress_bar.setValue(step)
        self.phase.setText(f"{PHASES.get(phase, phase)}: {step:,} of {total:,} · ETA {duration(eta)}")

    def _choose_model(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Base model folder (with its tokenizer and chat template)")
        if folder:
            self.model_edit.setText(folder)


def place(grid: QGridLayout, pairs: list) -> None:
    """Name and base model take a whole row; the rest go two to a row."""
    cells = [(0, 0, 3), (1, 0, 3)] + [(2 + i // 2, (i % 2) * 2, 1) for i in range(len(pairs) - 2)]
    for (label, field), (row, col, span) in zip(pairs, cells):
        grid.addWidget(QLabel(label), row, col)
        add = grid.addLayout if isinstance(field, QHBoxLayout) else grid.addWidget
        add(field, row, col + 1, 1, span)
