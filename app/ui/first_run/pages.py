"""The first-run wizard's page base and its capture and schedule pages: agents found, projects kept out, when to learn
(views: given the current settings, they return the choices; the wizard saves them)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError
from PySide6.QtCore import Qt, QTime
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QSpinBox,
    QTimeEdit,
    QVBoxLayout,
    QWidget,
    QWizardPage,
)

from app.core.base import settings
from app.core.base.errors import Explained
from app.core.capture.found import AgentFolders
from app.core.runtime.school.policy import Policy, window_bounds
from app.ui.kit import BAD_STYLE, DIM_STYLE, GOOD_STYLE, WARN_STYLE, label

DEPLOY = {"auto": "Use it right away", "ask": "Ask me first", "never": "Keep it aside (I deploy by hand)"}


def explained_html(error: Explained) -> str:
    """What happened / why / what to do, one line each."""
    lines = [f"<b>{_esc(error.message)}</b>"]
    lines += [f"{head}: {_esc(text)}" for head, text in (("Why", error.why), ("What to do", error.fix)) if text]
    return "<br>".join(lines)


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def tilde(path: str) -> str:
    home = str(Path.home())
    return "~" + path[len(home):] if path == home or path.startswith(home + "/") else path


class Page(QWizardPage):
    def __init__(self, title: str, subtitle: str) -> None:
        super().__init__()
        self.setTitle(title)
        self.box = QVBoxLayout(self)
        self.box.addWidget(label(subtitle))
        self.box.addSpacing(6)
        self.error = label(style=BAD_STYLE)
        self.error.setTextFormat(Qt.TextFormat.RichText)
        self.footnote = label(style=DIM_STYLE)

    def finish(self, footnote: str) -> None:
        """The error line under the page's own widgets, then the footnote at the bottom."""
        self.box.addWidget(self.error)
        self.box.addStretch(1)
        self.footnote.setText(footnote)
        self.box.addWidget(self.footnote)

    def show_error(self, error: Explained | str) -> None:
        self.error.setText(explained_html(error) if isinstance(error, Explained) else _esc(error))


class AgentsPage(Page):
    """Which agents' transcript folders exist and how many sessions each holds (looked up off the GUI thread)."""

    def __init__(self, look: Callable[[], None]) -> None:
        super().__init__("Your agents' work", "Nightschool learns from the sessions your coding agents record. "
                                              "This is what it found on this computer:")
        self.look, self.asked = look, False
        self.rows: dict[str, tuple[QLabel, QLabel]] = {}  # agent -> (status, folders)
        self.grid = QGridLayout()
        self.grid.setColumnStretch(2, 1)
        self.grid.setHorizontalSpacing(16)
        self.summary = label("Looking for transcripts…", DIM_STYLE)
        self.box.addLayout(self.grid)
        self.box.addWidget(self.summary)
        self.finish("Transcripts are read on this computer; secrets are replaced by placeholders before anything "
                    "is stored.")

    def initializePage(self) -> None:
        if not self.asked:
            self.asked = True
            self.look()

    def show_found(self, found: list[AgentFolders]) -> None:
        for row, agent in enumerate(found):
            name = label(f"<b>{agent.label}</b>")
            style = GOOD_STYLE if agent.sessions else (DIM_STYLE if agent.found else WARN_STYLE)
            status = label(_count_words(agent), style)
            where = "\n".join(tilde(p) for p in (agent.existing or agent.roots))
            folders = label(where if agent.found else f"Looked in {where}" if where else
                            "No folder is set for it in capture.json", DIM_STYLE, selectable=True)
            for column, widget in enumerate((name, status, folders)):
                self.grid.addWidget(widget, row, column, Qt.AlignmentFlag.AlignTop)
            self.rows[agent.agent] = (status, folders)
        total = sum(a.sessions for a in found)
        self.summary.setText(f"{total} session{'s' * (total != 1)} to learn from." if total else
                             "No sessions yet: that is fine, learning starts once your agents have worked a while.")


def _count_words(agent: AgentFolders) -> str:
    if not agent.found:
        return "not found"
    return f"{agent.sessions} session{'s' * (agent.sessions != 1)}" if agent.sessions else "no sessions yet"


class ExcludePage(Page):
    """The capture's exclude rules: projects whose sessions are never stored."""

    def __init__(self, projects: list[str], problem: str = "") -> None:
        super().__init__("Projects to keep out", "Sessions of these projects are never stored or learned from. "
                                                 "Give a project's name or folder; * matches anything "
                                                 "(e.g. client-* or ~/private/*).")
        self.list = QListWidget()
        self.list.addItems(projects)
        self.edit = QLineEdit()
        self.edit.setPlaceholderText("project name or folder")
        self.edit.returnPressed.connect(self.add)
        add, self.remove_button = QPushButton("Add"), QPushButton("Remove")
        add.clicked.connect(self.add)
        self.remove_button.clicked.connect(self.remove)
        self.box.addWidget(self.list, 1)
        row = QHBoxLayout()
        for widget in (self.edit, add, self.remove_button):
            row.addWidget(widget)
        self.box.addLayout(row)
        self.finish("Later: the Capture tab's “Keep out…” button, or capture.json in the data folder.")
        if problem:
            for widget in (self.list, self.edit, add, self.remove_button):
                widget.setEnabled(False)
            self.show_error(Explained("The capture settings cannot be changed here", why=problem))

    def add(self) -> None:
        text = self.edit.text().strip()
        if text and text not in self.projects():
            self.list.addItem(text)
        self.edit.clear()

    def remove(self) -> None:
        for item in self.list.selectedItems():
            self.list.takeItem(self.list.row(item))

    def projects(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]


class PolicyPage(Page):
    """The school policy's main fields: how many new sessions start a cycle, the window, what happens after."""

    def __init__(self, current: Policy) -> None:
        super().__init__("When to learn", "The school learns in cycles: build a dataset from new sessions, train, "
                                          "judge the result against the current model, then use it or not.")
        self.current = current
        self.sessions = QSpinBox()
        self.sessions.setRange(0, 100_000)
        self.sessions.setValue(current.min_sessions)
        self.box.addLayout(_line("Start a cycle after", self.sessions, "new sessions"))
        self.windowed = QCheckBox("Only start between")
        self.start, self.end = QTimeEdit(), QTimeEdit()
        for edit in (self.start, self.end):
            edit.setDisplayFormat("HH:mm")
        bounds = window_bounds(current.window) or window_bounds(Policy().window)
        self.start.setTime(QTime(bounds[0].hour, bounds[0].minute))
        self.end.setTime(QTime(bounds[1].hour, bounds[1].minute))
        self.windowed.setChecked(current.window != "any")
        self.windowed.toggled.connect(self._enable)
        self.box.addLayout(_line(self.windowed, self.start, "and", self.end, "(local time)"))
        self.deploy = QComboBox()
        for key, words in DEPLOY.items():
            self.deploy.addItem(words, key)
        self.deploy.setCurrentIndex(list(DEPLOY).index(current.deploy))
        self.box.addLayout(_line("When a new model is better:", self.deploy))
        self._enable()
        self.finish("A new model is used only when the judge measures a real gain on held-out sessions. Change "
                    "these later in the School tab or with `nightschool school policy`.")

    def _enable(self) -> None:
        self.start.setEnabled(self.windowed.isChecked())
        self.end.setEnabled(self.windowed.isChecked())

    def values(self) -> dict:
        window = f"{self.start.time().toString('HH:mm')}-{self.end.time().toString('HH:mm')}"
        return {"min_sessions": self.sessions.value(), "window": window if self.windowed.isChecked() else "any",
                "deploy": self.deploy.currentData()}

    def validatePage(self) -> bool:
        values = self.values()
        if values["window"] != "any" and self.start.time() == self.end.time():
            self.show_error(Explained("The window starts and ends at the same time",
                                      fix="choose two different times, or untick it to learn at any time"))
            return False
        try:
            Policy.model_validate({**self.current.model_dump(), **values})
        except ValidationError as exc:
            self.show_error(Explained("These values cannot be used", why=settings.plain_reason(exc)))
            return False
        self.error.clear()
        return True


def _line(*parts: QWidget | str) -> QHBoxLayout:
    row = QHBoxLayout()
    for part in parts:
        row.addWidget(QLabel(part) if isinstance(part, str) else part)
    row.addStretch(1)
    return row
