"""The panels' kit: colours as style sheets, labels, headings, buttons, splitters, read-only tables, local time."""
from __future__ import annotations

from datetime import UTC, datetime

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QLayout,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
)

from widgets.palette import BAD, DIM, FAINT, GOOD, WARN

__all__ = [
    "BAD",
    "BAD_STYLE",
    "DIM",
    "DIM_STYLE",
    "FAINT",
    "GOOD",
    "GOOD_STYLE",
    "HEAD_STYLE",
    "MAX_COLUMN_PX",
    "WARN",
    "WARN_STYLE",
    "arrange",
    "button",
    "fill",
    "heading",
    "key_at",
    "label",
    "local_time",
    "make_table",
    "reselect",
    "splitter",
]

DIM_STYLE, GOOD_STYLE, WARN_STYLE, BAD_STYLE = (f"color:{c};" for c in (DIM, GOOD, WARN, BAD))
HEAD_STYLE = "font-weight:bold;margin-top:6px;"
MAX_COLUMN_PX = 220  # a table column grows to fit its text up to this: a long project name must not squeeze the rest


# --- labels, buttons, layouts ----------------------------------------------------------------------------------
def label(text: str = "", style: str = "", selectable: bool = False) -> QLabel:
    """A word-wrapped label with a style sheet; selectable: the mouse can select its text."""
    out = QLabel(text)
    out.setWordWrap(True)
    out.setStyleSheet(style)
    if selectable:
        out.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return out


def heading(text: str) -> QLabel:
    out = QLabel(text)
    out.setStyleSheet(HEAD_STYLE)
    return out


def button(text: str, slot, tip: str = "") -> QPushButton:
    made = QPushButton(text)
    made.setToolTip(tip)
    made.clicked.connect(slot)
    return made


def arrange(layout: QLayout, *items, margins: tuple | None = None) -> QLayout:
    """Add widgets, layouts and stretches (an int) in order."""
    for item in items:
        if isinstance(item, QLayout):
            layout.addLayout(item)
        elif isinstance(item, int):
            layout.addStretch(item)
        else:
            layout.addWidget(item)
    if margins is not None:
        layout.setContentsMargins(*margins)
    return layout


def splitter(orientation, widgets: tuple, sizes: list[int], stretch: int | None = None,
             factors: tuple[int, ...] = ()) -> QSplitter:
    """The widgets side by side (or one above another) at `sizes`; stretch: the one that takes the room added (or
    factors: each one's share of it; neither: as Qt shares it)."""
    split = QSplitter(orientation)
    for widget in widgets:
        split.addWidget(widget)
    if stretch is not None:
        split.setStretchFactor(stretch, 1)
    for index, factor in enumerate(factors):
        split.setStretchFactor(index, factor)
    split.setSizes(sizes)
    return split


# --- read-only tables ------------------------------------------------------------------------------------------
def make_table(headers: list[str], stretch: int | None = None, striped: bool = True,
               widest: int | None = MAX_COLUMN_PX) -> QTableWidget:
    """A read-only table selecting one whole row; columns fit their text, the stretch column takes the rest; striped:
    alternating row colours; widest: no column grows past it (None: no limit)."""
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.verticalHeader().hide()
    table.setAlternatingRowColors(striped)
    table.setWordWrap(False)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    if stretch is not None:
        header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    if widest is not None:
        header.setMaximumSectionSize(widest)
    return table


def fill(table: QTableWidget, rows: list[list], keys: list | None = None) -> None:
    """Replace a table's rows; keys (one per row) are kept in column 0's UserRole."""
    table.blockSignals(True)
    table.setRowCount(len(rows))
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            item = QTableWidgetItem("" if value is None else str(value))
            item.setToolTip(item.text()[:2000])
            if isinstance(value, (int, float)):
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            table.setItem(r, c, item)
        if keys is not None:
            table.item(r, 0).setData(Qt.ItemDataRole.UserRole, keys[r])
    table.blockSignals(False)


def key_at(table: QTableWidget) -> object:
    rows = table.selectionModel().selectedRows()
    return table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole) if rows else None


def reselect(table: QTableWidget, key: object) -> None:
    """Select the row holding key (none if it is gone), without emitting selection signals."""
    table.blockSignals(True)
    table.clearSelection()
    for r in range(table.rowCount()):
        if table.item(r, 0).data(Qt.ItemDataRole.UserRole) == key:
            table.selectRow(r)
            break
    table.blockSignals(False)


# --- time ------------------------------------------------------------------------------------------------------
def local_time(when: str | datetime | None, fmt: str = "%Y-%m-%d %H:%M", zoneless_utc: bool = True) -> str:
    """A time (an ISO string or a datetime) in local time, "" for none, a string that is no ISO time as it is. A time
    without zone is UTC — what the store gives back — unless zoneless_utc is False: a transcript's own stamp without
    zone is already the agent's local time."""
    if not when:
        return ""
    if isinstance(when, str):
        try:
            when = datetime.fromisoformat(when)
        except ValueError:
            return when
    if when.tzinfo is None and zoneless_utc:
        when = when.replace(tzinfo=UTC)
    return when.astimezone().strftime(fmt)
