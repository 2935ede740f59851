"""The wizard's training pages: the base model, and the training engine (the engine check shows that page alone)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QButtonGroup,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QWidget,
)

from app.core.base.errors import Explained
from app.core.train.modelref import HUB_ID, ModelRefError, check_model_folder, is_embedded
from app.core.train.spec import DEFAULT_MODEL
from app.ui.first_run.pages import Page
from app.ui.first_run.work import WizardWork
from app.ui.kit import DIM_STYLE, GOOD_STYLE, WARN_STYLE, label


class ModelPage(Page):
    """The base model the student starts from: the embedded default, a local folder, or a hub id."""

    def __init__(self, current: str) -> None:
        super().__init__("Base model", "The student starts from a small open model and learns on top of it.")
        self.group = QButtonGroup(self)
        self.default = self._option("The built-in model: SmolLM2-135M-Instruct",
                                    "Small, trains on an ordinary laptop, nothing to download.")
        self.folder = self._option("A model folder on this computer",
                                   "A Hugging Face model folder: config.json, weights and tokenizer files.")
        self.folder_edit, browse = QLineEdit(), QPushButton("Choose…")
        browse.clicked.connect(self._browse)
        self.box.addLayout(_row(self.folder_edit, browse))
        self.hub = self._option("A model on the Hugging Face hub",
                                "Downloaded when first used: this needs a reachable hub (internet or a mirror).")
        self.hub_edit = QLineEdit()
        self.hub_edit.setPlaceholderText("e.g. HuggingFaceTB/SmolLM2-360M-Instruct")
        self.suggested = QComboBox()
        self.suggested.setToolTip("Students that fit this machine's memory (and GPU), with a cycle's training time "
                                  "where this machine's speed has been measured")
        self.suggested.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.suggested.addItem("Suggested for this machine…", None)
        self.suggested.activated.connect(self._suggest)
        self.box.addLayout(_row(self.hub_edit, self.suggested))
        self.fit_note = label("Looking at what this machine can train…", DIM_STYLE)
        self.fit_note.setWordWrap(True)
        self.box.addWidget(self.fit_note)
        self._select(current)
        self.group.buttonToggled.connect(lambda *_: self._enable())
        self._enable()
        self.finish("Change it later with `nightschool school policy base_model …`.")

    def show_students(self, out: dict) -> None:
        """What fits this machine (School.students()), as choices for the hub box and one line of evidence."""
        from app.core.base.words import duration_words

        self.suggested.clear()
        self.suggested.addItem("Suggested for this machine…", None)
        fitting = [o for o in out.get("students", []) if o["fits"] and o["base_model"] != DEFAULT_MODEL
                   and "/" in o["base_model"] and not Path(o["base_model"]).is_absolute()]
        for o in fitting:
            took = duration_words(o["cycle_training_s"])
            self.suggested.addItem(f"{o['name']} ({o['method']}" + (f", a cycle ≈ {took})" if took else ")"),
                                   o["base_model"])
        mine = next((o for o in out.get("students", []) if o["base_model"] == DEFAULT_MODEL), None)
        speed = (f"the built-in model trains a cycle in about {duration_words(mine['cycle_training_s'])} here"
                 if mine and mine["cycle_training_s"] else "a cycle's time shows once this machine has trained "
                                                           "(or: nightschool school students --measure REF)")
        bigger = sum(1 for o in out.get("students", []) if not o["fits"])
        machine = out.get("machine", "?")
        need = "more GPU memory" if "GiB)" in machine else "a GPU"
        self.fit_note.setText(f"This machine: {machine}. {len(fitting) + 1} students fit it; {bigger} larger ones "
                              f"need {need}. {speed[:1].upper() + speed[1:]}.")

    def _suggest(self, index: int) -> None:
        ref = self.suggested.itemData(index)
        if ref:
            self.hub.setChecked(True)
            self.hub_edit.setText(ref)
            self._enable()

    def _option(self, text: str, note: str) -> QRadioButton:
        button = QRadioButton(text)
        self.group.addButton(button)
        self.box.addWidget(button)
        self.box.addLayout(_row(label(note, DIM_STYLE)))
        return button

    def _select(self, current: str) -> None:
        if is_embedded(current):
            self.default.setChecked(True)
        elif Path(current).expanduser().exists() or current.startswith(("/", ".", "~")):
            self.folder.setChecked(True)
            self.folder_edit.setText(current)
        else:
            self.hub.setChecked(True)
            self.hub_edit.setText(current)

    def _enable(self) -> None:
        self.folder_edit.setEnabled(self.folder.isChecked())
        self.hub_edit.setEnabled(self.hub.isChecked())
        self.error.clear()

    def _browse(self) -> None:
        chosen = QFileDialog.getExistingDirectory(self, "Choose a model folder", self.folder_edit.text())
        if chosen:
            self.folder.setChecked(True)
            self.folder_edit.setText(chosen)
            self.validatePage()

    def choice(self) -> str:
        if self.folder.isChecked():
            return str(Path(self.folder_edit.text().strip()).expanduser().resolve())
        return self.hub_edit.text().strip() if self.hub.isChecked() else DEFAULT_MODEL

    def check(self) -> None:
        """Raise ModelRefError for a choice the app would refuse."""
        if self.folder.isChecked():
            if not self.folder_edit.text().strip():
                raise ModelRefError("No model folder chosen", fix="click Choose… or use the built-in model")
            check_model_folder(Path(self.choice()))
        elif self.hub.isChecked() and not HUB_ID.match(self.choice()):
            raise ModelRefError(f"{self.choice()!r} is not a hub id" if self.choice() else "No hub id given",
                                why="a hub id is owner/name",
                                fix="type one like HuggingFaceTB/SmolLM2-360M-Instruct, or use the built-in model")

    def validatePage(self) -> bool:
        try:
            self.check()
        except ModelRefError as exc:
            self.show_error(exc)
            return False
        self.error.clear()
        return True


def _row(*widgets: QWidget) -> QHBoxLayout:
    row = QHBoxLayout()
    row.setContentsMargins(24, 0, 0, 6)
    for widget in widgets:
        row.addWidget(widget)
    return row


STATES = {"ready": ("The training engine is ready.", GOOD_STYLE, ""),
          "external": ("Nothing to set up: the training engine is already there.", GOOD_STYLE, ""),
          "missing": ("The training engine is not installed yet.", WARN_STYLE, "Set up now"),
          "partial": ("The training engine is partly installed.", WARN_STYLE, "Set up now"),
          "outdated": ("The training engine is from another version of Nightschool.", WARN_STYLE, "Set up again"),
          "broken": ("The training engine is damaged.", WARN_STYLE, "Repair")}


def sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if not text or text.endswith((".", "!", "?")) else ".")


class EnginePage(Page):
    """The training engine's environment: its state, and a setup with progress, Cancel and what / why / fix."""

    def __init__(self, work: WizardWork) -> None:
        super().__init__("Engine", "Training runs in its own Python environment with PyTorch. It is set up once; the "
                                   "download is large (hundreds of megabytes to a few gigabytes).")
        self.work, self.asked, self.repair = work, False, False
        self.state = label("Checking the training engine…")
        self.detail, self.python = label(), label(style=DIM_STYLE, selectable=True)
        self.setup_button, self.cancel_button = QPushButton("Set up now"), QPushButton("Cancel")
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.stage, self.size = label(), label(style=DIM_STYLE)
        for widget in (self.state, self.detail, self.python):
            self.box.addWidget(widget)
        buttons = QHBoxLayout()
        buttons.addWidget(self.setup_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        self.box.addLayout(buttons)
        for widget in (self.bar, self.stage, self.size):
            self.box.addWidget(widget)
        self.setup_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        work.status.connect(self.show_status)
        work.progress.connect(self.show_progress)
        work.done.connect(self.show_status)
        work.failed.connect(self.show_error)
        work.busy_changed.connect(lambda _busy: self.completeChanged.emit())
        self._running(False)
        for widget in (self.setup_button, self.detail, self.python):
            widget.hide()
        self.finish("You can go on without it and set it up later: the app offers it again at start, "
                    "or `nightschool engine setup`.")

    def initializePage(self) -> None:
        if self.work.engine is None:
            self.state.setText("Engine setup is not part of this build.")
        elif not self.asked:
            self.asked = True
            self.work.read_status()

    def isComplete(self) -> bool:
        return not self.work.busy

    def show_status(self, status: Any) -> None:
        self._running(False)
        words, style, button = STATES.get(status.state, (f"The training engine is {status.state}.", WARN_STYLE,
                                                          "Set up now"))
        self.state.setText(words)
        self.state.setStyleSheet(style)
        self.detail.setText(sentence(status.detail or ""))
        self.detail.setVisible(bool(status.detail))
        self.python.setText(f"Python: {status.python}" if status.python else "")
        self.python.setVisible(bool(status.python))
        self.footnote.setVisible(status.state not in ("ready", "external"))
        self.repair = status.state == "broken"
        self.setup_button.setText(button or "Set up now")
        self.setup_button.setVisible(bool(button))

    def start(self) -> None:
        self.error.clear()
        self.stage.setText("Starting…")
        self.size.clear()
        self.bar.setValue(0)
        self._running(True)
        self.work.setup(repair=self.repair)

    def cancel(self) -> None:
        self.work.cancel()
        self.cancel_button.setEnabled(False)
        self.stage.setText("Stopping…")

    def show_progress(self, p: Any) -> None:
        """A SetupProgress: its words and share (the terminal's `nightschool engine setup` says the same)."""
        stage, size = p.words()
        self.stage.setText(stage)
        self.size.setText(size)
        self.bar.setValue(p.share())

    def show_error(self, error: Explained | str) -> None:
        """A failed (or cancelled) setup or status read: what / why / fix, then the state as it is now."""
        super().show_error(error)
        if not self.work.busy and not self.bar.isHidden():  # a setup ended: what is installed now?
            self._running(False)
            self.work.read_status()

    def _running(self, running: bool) -> None:
        for widget in (self.bar, self.stage, self.size, self.cancel_button):
            widget.setVisible(running)
        self.cancel_button.setEnabled(running)
        self.setup_button.setEnabled(not running)
