"""Job list: one row per job with state, a progress bar, ETA and last loss."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QProgressBar, QTableWidget, QTableWidgetItem

COLUMNS = ["Job", "State", "Progress", "ETA", "Loss", "Data"]
STATE_COLOURS = {"running": "#4f8cff", "paused": "#ff9f43", "completed": "#2ecc71", "stopped": "#a0a4ab",
                 "failed": "#ff5c5c", "loading": "#b388ff", "starting": "#b388ff", "stopping": "#ff9f43",
                 "saving": "#b388ff"}


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class JobTable(QTableWidget):
    """Rows keyed by job id; `job_selected` fires with the id of the chosen row."""

    job_selected = Signal(str)

    def __init__(self, parent=None) -> None:
        super().__init__(0, len(COLUMNS), parent)
        self.setHorizontalHeaderLabels(COLUMNS)
        self.verticalHeader().setVisible(False)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self._rows: dict[str, int] = {}
        self.itemSelectionChanged.connect(self._emit_selection)

    def job_ids(self) -> list[str]:
        return list(self._rows)

    def upsert(self, job_id: str, state: str | None = None, step: int | None = None, total: int | None = None,
               eta: float | None = None, loss: float | None = None, data: str | None = None) -> None:
        row = self._rows.get(job_id)
        if row is None:
            row = self._insert(job_id)
        if state is not None:
            item = QTableWidgetItem(state)
            item.setForeground(Qt.GlobalColor.white)
            item.setBackground(_colour(STATE_COLOURS.get(state, "#666")))
            self.setItem(row, 1, item)
        if total:
            bar: QProgressBar = self.cellWidget(row, 2)
            bar.setMaximum(total)
            bar.setValue(step or 0)
            bar.setFormat(f"{step or 0}/{total}")
        if eta is not None or state in ("completed", "stopped", "failed"):
            self.setItem(row, 3, QTableWidgetItem(format_eta(eta) if state not in ("completed", "stopped",
                                                                                     "failed") else "—"))
        if loss is not None:
            self.setItem(row, 4, QTableWidgetItem(f"{loss:.4f}"))
        if data is not None:
            self.setItem(row, 5, QTableWidgetItem(data))

    def text(self, job_id: str, column: str) -> str:
        item = self.item(self._rows[job_id], COLUMNS.index(column))
        return item.text() if item else ""

    def progress(self, job_id: str) -> tuple[int, int]:
        bar: QProgressBar = self.cellWidget(self._rows[job_id], 2)
        return bar.value(), bar.maximum()

    def select(self, job_id: str) -> None:
        self.selectRow(self._rows[job_id])

    def _insert(self, job_id: str) -> int:
        self.insertRow(0)  # newest first
        self._rows = {jid: r + 1 for jid, r in self._rows.items()}
        self._rows[job_id] = 0
        self.setItem(0, 0, QTableWidgetItem(job_id))
        bar = QProgressBar()
        bar.setMaximum(1)
        bar.setValue(0)
        bar.setFormat("—")
        self.setCellWidget(0, 2, bar)
        return 0

    def _emit_selection(self) -> None:
        rows = {i.row() for i in self.selectedIndexes()}
        if rows:
            row = rows.pop()
            job = next((jid for jid, r in self._rows.items() if r == row), None)
            if job:
                self.job_selected.emit(job)


def _colour(hex_: str):
    from PySide6.QtGui import QColor

    return QColor(hex_)
