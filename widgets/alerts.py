"""Alerts list: one row per alert (severity icon and colour, kind, step, message), a count badge on its title, and
a viewer for the selected alert's diagnosis. Given data only: the caller reads files and passes the text."""
from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QTextCursor, QTextDocument
from PySide6.QtWidgets import (QAbstractItemView, QHBoxLayout, QHeaderView, QLabel, QSplitter, QStyle, QTextBrowser,
                               QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget)

COLUMNS = ["", "Kind", "Step", "Message"]
SEVERITY_COLOURS = {"info": "#8ab4ff", "warning": "#ffb86c", "fatal": "#ff6b6b"}
SEVERITY_ICONS = {"info": QStyle.StandardPixmap.SP_MessageBoxInformation,
                  "warning": QStyle.StandardPixmap.SP_MessageBoxWarning,
                  "fatal": QStyle.StandardPixmap.SP_MessageBoxCritical}
FATAL_BACKGROUND = "#4a1c21"
LINK_COLOUR = "#8ab4ff"
BADGE_STYLE = "border-radius:8px;padding:0px 7px;font-weight:bold;"
BADGE_COLOURS = {"none": ("#3a3c43", "#9aa0aa"), "info": ("#1f3b5c", "#d7e8ff"), "warning": ("#6b4a1c", "#ffe2bd"),
                 "fatal": ("#a82a33", "#ffffff")}
EMPTY_TEXT = "No alerts for this job: the checker has seen nothing wrong."
PROMPT_TEXT = "Select an alert to see its diagnosis."


class AlertList(QWidget):
    """Rows in arrival order; `alert_selected` fires with the row's index (the caller then calls show_diagnosis)."""

    alert_selected = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.title = QLabel("<b>Alerts</b>")
        self.badge = QLabel("0")
        self.badge.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.badge.setMinimumWidth(22)
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.title)
        header.addWidget(self.badge)
        header.addStretch(1)
        self.tree = QTreeWidget()
        self.tree.setColumnCount(len(COLUMNS))
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        head = self.tree.header()
        head.setStretchLastSection(True)
        for col in range(len(COLUMNS) - 1):
            head.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.itemSelectionChanged.connect(self._emit_selection)
        self.diagnosis = QTextBrowser()
        self.diagnosis.setOpenExternalLinks(True)
        self.diagnosis.setPlaceholderText(EMPTY_TEXT)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.tree)
        split.addWidget(self.diagnosis)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        split.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.addLayout(header)
        layout.addWidget(split, 1)
        self._rows: list[dict] = []
        self._update_badge()

    # --- data -------------------------------------------------------------------------------------
    def clear(self, empty: str = EMPTY_TEXT) -> None:
        """No rows; `empty` is what the diagnosis box says until an alert comes (e.g. that no job is selected)."""
        self.tree.clear()
        self._rows.clear()
        self.diagnosis.clear()
        self.diagnosis.setPlaceholderText(empty)
        self._update_badge()

    def add(self, severity: str, kind: str, step: int | None, message: str) -> int:
        """Append a row; returns its index."""
        severity = severity if severity in SEVERITY_COLOURS else "warning"
        item = QTreeWidgetItem(["", kind, "" if step is None else str(step), message])
        item.setIcon(0, self.style().standardIcon(SEVERITY_ICONS[severity]))
        item.setToolTip(0, severity)
        item.setToolTip(3, message)
        colour = QColor(SEVERITY_COLOURS[severity])
        for col in (1, 2):
            item.setForeground(col, QBrush(colour))
        item.setTextAlignment(2, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if severity == "fatal":  # the run was stopped: the row stands out
            bold = QFont(item.font(1))
            bold.setBold(True)
            for col in range(len(COLUMNS)):
                item.setFont(col, bold)
                item.setBackground(col, QBrush(QColor(FATAL_BACKGROUND)))
            item.setForeground(3, QBrush(QColor("#ffd7d7")))
        self.tree.addTopLevelItem(item)
        self._rows.append({"severity": severity, "kind": kind, "step": step, "message": message})
        if len(self._rows) == 1:
            self.diagnosis.setPlaceholderText(PROMPT_TEXT)
        self._update_badge()
        return len(self._rows) - 1

    def count(self) -> int:
        return len(self._rows)

    def fatal_count(self) -> int:
        return sum(r["severity"] == "fatal" for r in self._rows)

    def row(self, index: int) -> dict:
        """What a row shows (severity, kind, step, message) and whether it is marked fatal (bold, red)."""
        item = self.tree.topLevelItem(index)
        return {**self._rows[index], "bold": item.font(1).bold(),
                "background": (item.background(1).color().name()
                               if item.background(1).style() != Qt.BrushStyle.NoBrush else None)}

    # --- selection and diagnosis ----------------------------------------------------------------------
    def select(self, index: int) -> None:
        self.tree.setCurrentItem(self.tree.topLevelItem(index))

    def selected(self) -> int | None:
        items = self.tree.selectedItems()
        return self.tree.indexOfTopLevelItem(items[0]) if items else None

    def show_diagnosis(self, text: str, markdown: bool = True, file: str | None = None) -> None:
        """Show a diagnosis; `file` adds a link to the whole file under it."""
        if markdown:  # GitHub dialect without raw HTML: the text is shown, never interpreted as markup
            features = (QTextDocument.MarkdownFeature.MarkdownDialectGitHub
                        | QTextDocument.MarkdownFeature.MarkdownNoHTML)
            self.diagnosis.document().setMarkdown(text, features)
        else:
            self.diagnosis.setPlainText(text)
        if file:
            path = Path(file)
            cursor = self.diagnosis.textCursor()
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertHtml(f"<br><a href='{path.resolve().as_uri()}' style='color:{LINK_COLOUR}'>"
                              f"Open the whole {html.escape(path.name)}</a>")
            self.diagnosis.moveCursor(QTextCursor.MoveOperation.Start)

    def diagnosis_text(self) -> str:
        return self.diagnosis.toPlainText()

    def _emit_selection(self) -> None:
        index = self.selected()
        if index is not None:
            self.alert_selected.emit(index)

    def _update_badge(self) -> None:
        n, fatal = len(self._rows), self.fatal_count()
        worst = ("fatal" if fatal else "warning" if any(r["severity"] == "warning" for r in self._rows)
                 else "info" if n else "none")
        background, colour = BADGE_COLOURS[worst]
        self.badge.setText(str(n))
        self.badge.setStyleSheet(f"{BADGE_STYLE}background:{background};color:{colour};")
        self.badge.setToolTip(f"{n} alert{'s' if n != 1 else ''}" + (f", {fatal} fatal" if fatal else ""))
