"""Side-by-side generations: a held-out prompt (picked from a list), the teacher's next action and each model's
generation for it in columns, with the judged outcome over each (given data only)."""
from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPlainTextEdit, QSplitter, QVBoxLayout, QWidget

AGREE, OTHER, MISSING = "#2ecc71", "#ff9f43", "#9aa0aa"
TITLE = "font-weight:bold;"
PICK_CHARS = 90  # how much of a prompt's last line the picker shows


@dataclass
class Output:
    label: str  # the model
    text: str | None  # its generation; None when this model has no case with this key
    outcome: str = ""  # agree | other_tool | no_call | …
    words: str = ""  # the outcome as a person reads it (the outcome itself when empty)


@dataclass
class Case:
    """One held-out prompt: the context's end, the teacher's action and each model's output."""

    key: str
    prompt: str
    teacher: str
    outputs: list[Output] = field(default_factory=list)


def pick_text(n: int, case: Case) -> str:
    lines = [line for line in case.prompt.splitlines() if line.strip()]
    last = lines[-1] if lines else case.key
    return f"{n + 1}. " + (last if len(last) <= PICK_CHARS else last[:PICK_CHARS - 1] + "…")


def outcome_html(outcome: str, text: str | None, words: str = "") -> str:
    if text is None:
        return f"<span style='color:{MISSING}'>no generation for this prompt</span>"
    colour = AGREE if outcome == "agree" else OTHER
    return f"<span style='color:{colour}'>{escape(words or outcome) or '—'}</span>"


def text_box(text: str = "") -> QPlainTextEdit:
    box = QPlainTextEdit(text)
    box.setReadOnly(True)
    box.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
    return box


class Pane(QWidget):
    """A titled text column (the teacher, or one model)."""

    def __init__(self, title: str, parent=None) -> None:
        super().__init__(parent)
        self.title = QLabel(title)
        self.title.setStyleSheet(TITLE)
        self.note = QLabel()
        self.text = text_box()
        self.text.setPlaceholderText(f"{title}'s answer to the picked held-out prompt appears here.")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        head = QHBoxLayout()
        head.addWidget(self.title)
        head.addStretch(1)
        head.addWidget(self.note)
        layout.addLayout(head)
        layout.addWidget(self.text, 1)

    def show_text(self, title: str, text: str, note: str = "") -> None:
        self.title.setText(title)
        self.note.setText(note)
        self.text.setPlainText(text)


class SideBySide(QWidget):
    """set_cases(cases): the picker lists the prompts; the chosen one fills the prompt box and the columns."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.cases: list[Case] = []
        self.picker = QComboBox()
        self.picker.setMinimumContentsLength(40)
        self.picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.picker.currentIndexChanged.connect(self._show)
        self.prompt = text_box()
        self.prompt.setPlaceholderText("Compare models to see their generations for the same held-out prompts.")
        self.columns = QSplitter(Qt.Orientation.Horizontal)
        self.teacher = Pane("Teacher")
        self.columns.addWidget(self.teacher)
        self.panes: list[Pane] = []
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.prompt)
        split.addWidget(self.columns)
        split.setSizes([80, 260])
        top = QHBoxLayout()
        top.addWidget(QLabel("Held-out prompt"))
        top.addWidget(self.picker, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(split, 1)

    def set_cases(self, cases: list[Case]) -> None:
        self.cases = list(cases)
        width = max((len(c.outputs) for c in cases), default=0)
        self._ensure_panes(width)
        self.picker.blockSignals(True)
        self.picker.clear()
        self.picker.addItems([pick_text(n, c) for n, c in enumerate(cases)])
        self.picker.blockSignals(False)
        self._show(0 if cases else -1)

    def _ensure_panes(self, count: int) -> None:
        while len(self.panes) < count:
            pane = Pane("")
            self.columns.addWidget(pane)
            self.panes.append(pane)
        for n, pane in enumerate(self.panes):
            pane.setVisible(n < count)
        self.columns.setSizes([1000] * (count + 1))

    def choose(self, index: int) -> None:
        self.picker.setCurrentIndex(index)

    def _show(self, index: int) -> None:
        if not 0 <= index < len(self.cases):
            self.prompt.setPlainText("")
            self.teacher.show_text("Teacher", "")
            return
        case = self.cases[index]
        self.prompt.setPlainText(case.prompt)
        self.teacher.show_text("Teacher", case.teacher, "the recorded next action")
        for pane, out in zip(self.panes, case.outputs):
            pane.show_text(out.label, out.text or "", outcome_html(out.outcome, out.text, out.words))

    # --- reading (tests) ---------------------------------------------------------------------------------
    def shown(self) -> dict[str, str]:
        """What the visible columns hold: {"Teacher": text, model label: text, "prompt": text}."""
        out = {"prompt": self.prompt.toPlainText(), "Teacher": self.teacher.text.toPlainText()}
        for pane in self.panes:
            if not pane.isHidden():
                out[pane.title.text()] = pane.text.toPlainText()
        return out
