"""Metric table of compared models: one row per metric, one column per model, each value with its delta against a
reference column, green where better and red where worse (given data only)."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QPainter
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

BETTER, WORSE, SAME = "#2ecc71", "#ff6b6b", "#9aa0aa"
EPSILON = 1e-9  # a delta this small is no change


def fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def delta_of(value: float | None, reference: float | None) -> float | None:
    if value is None or reference is None:
        return None
    return value - reference


def colour_of(delta: float | None, better: str) -> str:
    """green when the delta goes the metric's better way ("lower" | "higher"), red when the other, grey when none."""
    if delta is None or abs(delta) < EPSILON:
        return SAME
    return BETTER if (delta < 0) == (better == "lower") else WORSE


def cell_text(value: float | None, reference: float | None, is_reference: bool) -> str:
    delta = delta_of(value, reference)
    if is_reference or delta is None:
        return fmt(value)
    return f"{fmt(value)}  ({delta:+.3f})"


class CompareTable(QTableWidget):
    """set_data(rows, columns, reference): rows are (key, words, "lower" | "higher"); columns are (label, {key:
    value}); the reference column shows plain values, the others value + delta coloured by direction."""

    def __init__(self, parent=None, empty: str = "") -> None:
        """empty: what the table says in its middle while it has no column."""
        super().__init__(parent)
        self.empty = empty
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.setAlternatingRowColors(True)
        self.setWordWrap(False)
        self.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.horizontalHeader().setStretchLastSection(False)  # a narrow table scrolls; it never elides a delta
        self._rows: list[tuple[str, str, str]] = []
        self._labels: list[str] = []

    def paintEvent(self, event) -> None:
        super().paintEvent(event)
        if self.columnCount() == 0 and self.empty:
            painter = QPainter(self.viewport())
            painter.setPen(QColor(SAME))
            painter.drawText(self.viewport().rect().adjusted(16, 16, -16, -16),
                             int(Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap), self.empty)
            painter.end()

    def set_data(self, rows: list[tuple[str, str, str]], columns: list[tuple[str, dict]], reference: int) -> None:
        self.clear()
        self._rows, self._labels = list(rows), [label for label, _ in columns]
        self.setRowCount(len(rows))
        self.setColumnCount(len(columns))
        self.setVerticalHeaderLabels([words for _, words, _ in rows])
        self.setHorizontalHeaderLabels([label + ("\n(reference)" if n == reference else "")
                                        for n, (label, _) in enumerate(columns)])
        ref_values = columns[reference][1] if columns else {}
        for r, (key, words, better) in enumerate(rows):
            self.verticalHeaderItem(r).setToolTip(f"{words}: {better} is better")
            for c, (label, values) in enumerate(columns):
                self.setItem(r, c, self._cell(values.get(key), ref_values.get(key), better, c == reference))

    def _cell(self, value, reference, better: str, is_reference: bool) -> QTableWidgetItem:
        item = QTableWidgetItem(cell_text(value, reference, is_reference))
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if not is_reference:
            item.setForeground(QBrush(QColor(colour_of(delta_of(value, reference), better))))
            delta = delta_of(value, reference)
            if delta is not None:
                item.setToolTip(f"{delta:+.4f} against the reference ({better} is better)")
        return item

    # --- reading (tests, the panel) ----------------------------------------------------------------------
    def cell(self, key: str, label: str) -> QTableWidgetItem | None:
        """The item of a metric for a model's column."""
        rows = [k for k, _, _ in self._rows]
        if key not in rows or label not in self._labels:
            return None
        return self.item(rows.index(key), self._labels.index(label))

    def labels(self) -> list[str]:
        return list(self._labels)
