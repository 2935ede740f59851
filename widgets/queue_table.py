"""Queue table: one row per queued, running or recently finished job, a progress bar, a priority combo per waiting row,
and drag-to-reorder of waiting rows (the drop is only a request: the queue decides, the next rows show it)."""
from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import (QAbstractTableModel, QByteArray, QItemSelectionModel, QMimeData, QModelIndex, Qt,
                            Signal)
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QAbstractItemView, QApplication, QComboBox, QHeaderView, QStyle,
                               QStyledItemDelegate, QStyleOptionProgressBar, QTableView)

from widgets.job_table import STATE_COLOURS
from widgets.palette import FAINT

COLUMNS = ["#", "Job", "Recipe", "Priority", "State", "Progress", "ETA / starts in", "Source", "Data"]
PLACE, JOB, RECIPE, PRIORITY, STATE, PROGRESS, TIMING, SOURCE, DATA = range(len(COLUMNS))
PRIORITIES = ("high", "normal", "low")
MIME = "application/x-nightschool-queue-job"
COLOURS = {**STATE_COLOURS, "queued": "#3a3d45", "held": "#8a6d1f", "cancelled": "#6b6f78", "validated": "#2ecc71",
           "launching": "#b388ff"}
STEPPED_BACK = QColor(FAINT)  # a finished row's text


@dataclass(frozen=True)
class QueueRow:
    """What one row shows (formatted by the caller; this widget knows nothing of jobs or stores)."""

    job_id: str
    place: int | None
    recipe: str
    priority: str
    state: str
    step: int | None = None
    total: int | None = None
    timing: str = ""
    source: str = ""
    data: str = ""
    error: str | None = None
    waiting: bool = False  # queued or held: may be dragged and re-prioritised


class QueueModel(QAbstractTableModel):
    move_requested = Signal(str, object)  # job id, the waiting job it goes before (None: the end)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.rows: list[QueueRow] = []

    def set_rows(self, rows: list[QueueRow]) -> bool:
        """Replace the rows; True when the row set or order changed (a reset), False for an in-place update."""
        shape = [(r.job_id, r.waiting) for r in rows]
        if shape != [(r.job_id, r.waiting) for r in self.rows]:
            self.beginResetModel()
            self.rows = list(rows)
            self.endResetModel()
            return True
        changed = [i for i, (old, new) in enumerate(zip(self.rows, rows)) if old != new]
        self.rows = list(rows)
        if changed:
            self.dataChanged.emit(self.index(min(changed), 0), self.index(max(changed), len(COLUMNS) - 1))
        return False

    def row_of(self, job_id: str) -> int | None:
        return next((i for i, r in enumerate(self.rows) if r.job_id == job_id), None)

    # --- table -------------------------------------------------------------------------------------
    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 - Qt API
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802 - Qt API
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802 - Qt API
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.ToolTipRole:
            return {PLACE: "Run order: running jobs first, then waiting ones",
                    PRIORITY: "Drag a waiting row among another priority's rows, or pick here, to change it",
                    TIMING: "Running: time left. Waiting: when it starts and how long it takes"}.get(section)
        return None

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        row, col = self.rows[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._text(row, col)
        if role == Qt.ItemDataRole.ToolTipRole:
            if row.error and col in (STATE, JOB, TIMING):
                return row.error
            return self._text(row, col) or None
        if role == Qt.ItemDataRole.BackgroundRole and col == STATE:
            return QColor(COLOURS.get(row.state, "#666"))
        if role == Qt.ItemDataRole.ForegroundRole:
            if col == STATE:
                return QColor("#ffffff")
            if row.place is None:
                return STEPPED_BACK  # finished rows step back
        if role == Qt.ItemDataRole.TextAlignmentRole and col == PLACE:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.UserRole:
            return row.job_id
        return None

    @staticmethod
    def _text(row: QueueRow, col: int) -> str:
        if col == PROGRESS:
            return f"{row.step or 0}/{row.total}" if row.total else "—"
        if col == STATE and row.error and row.state == "failed":
            return "failed ⚠"
        return {PLACE: "" if row.place is None else str(row.place), JOB: row.job_id, RECIPE: row.recipe,
                PRIORITY: row.priority, STATE: row.state, TIMING: row.timing, SOURCE: row.source,
                DATA: row.data}.get(col, "")

    def flags(self, index):
        if not index.isValid():
            return Qt.ItemFlag.ItemIsDropEnabled  # the table takes drops between rows
        base = super().flags(index)
        if self.rows[index.row()].waiting:
            base |= Qt.ItemFlag.ItemIsDragEnabled
        return base  # rows are never drop targets themselves: a drop lands between rows

    # --- drag to reorder ---------------------------------------------------------------------------
    def mimeTypes(self) -> list[str]:  # noqa: N802 - Qt API
        return [MIME]

    def mimeData(self, indexes) -> QMimeData:  # noqa: N802 - Qt API
        mime = QMimeData()
        rows = sorted({i.row() for i in indexes if i.isValid()})
        if rows:
            mime.setData(MIME, QByteArray(self.rows[rows[0]].job_id.encode()))
        return mime

    def supportedDragActions(self):  # noqa: N802 - Qt API
        return Qt.DropAction.MoveAction

    def supportedDropActions(self):  # noqa: N802 - Qt API
        return Qt.DropAction.MoveAction

    def dropMimeData(self, data, action, row, column, parent) -> bool:  # noqa: N802 - Qt API
        """A waiting row dropped before `row` (-1: past the end): ask for `move(job, before=…)`."""
        if not data.hasFormat(MIME):
            return False
        job_id = bytes(data.data(MIME).data()).decode()
        target = self.drop_target(job_id, row if row >= 0 else (parent.row() if parent.isValid() else len(self.rows)))
        if target is False:
            return False
        self.move_requested.emit(job_id, target)
        return True

    def drop_target(self, job_id: str, row: int) -> str | None | bool:
        """The waiting job a drop before `row` puts job_id in front of (None: the end); False when it stays put."""
        waiting = [(i, r) for i, r in enumerate(self.rows) if r.waiting]
        ids = [r.job_id for _, r in waiting]
        if job_id not in ids:
            return False
        before = next((r for i, r in waiting if i >= row), None)
        me = ids.index(job_id)
        if before is None:
            return False if me == len(ids) - 1 else None
        if before.job_id == job_id:
            return False
        following = waiting[me + 1][1] if me + 1 < len(waiting) else None
        if following is not None and before.job_id == following.job_id \
                and following.priority == waiting[me][1].priority:
            return False  # dropped just below itself, within its priority: no change
        return before.job_id


class ProgressDelegate(QStyledItemDelegate):
    """A progress bar (step/total) painted in the cell; a dash when there is no progress yet."""

    def paint(self, painter, option, index) -> None:
        row: QueueRow = index.model().rows[index.row()]
        if not row.total:
            super().paint(painter, option, index)
            return
        bar = QStyleOptionProgressBar()
        bar.rect = option.rect.adjusted(2, 3, -2, -3)
        bar.minimum, bar.maximum = 0, max(row.total, 1)
        bar.progress = min(row.step or 0, row.total)
        bar.text, bar.textVisible = f"{row.step or 0}/{row.total}", True
        bar.state = option.state
        bar.palette = option.palette
        style = option.widget.style() if option.widget else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ProgressBar, bar, painter, option.widget)


class QueueTable(QTableView):
    """The view: `job_selected(id | None)`, `priority_requested(id, priority)`, `move_requested(id, before | None)`."""

    job_selected = Signal(object)
    priority_requested = Signal(str, str)
    move_requested = Signal(str, object)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.queue_model = QueueModel(self)
        self.setModel(self.queue_model)
        self.queue_model.move_requested.connect(self.move_requested)
        self.setItemDelegateForColumn(PROGRESS, ProgressDelegate(self))
        self.verticalHeader().hide()
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setAlternatingRowColors(True)
        self.setWordWrap(False)
        self.setDragEnabled(True)
        self.setAcceptDrops(True)
        self.setDropIndicatorShown(True)
        self.setDragDropMode(QAbstractItemView.DragDropMode.DragDrop)  # external file drags pass up to the window
        self.setDefaultDropAction(Qt.DropAction.MoveAction)
        self.setDragDropOverwriteMode(False)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(PROGRESS, QHeaderView.ResizeMode.Fixed)
        header.setSectionResizeMode(DATA, QHeaderView.ResizeMode.Stretch)
        header.setMinimumSectionSize(36)
        self.setColumnWidth(PROGRESS, 150)
        self._combos: dict[str, QComboBox] = {}
        self._selected: str | None = None
        self.selectionModel().selectionChanged.connect(self._on_selection)

    # --- data in -----------------------------------------------------------------------------------
    def set_rows(self, rows: list[QueueRow]) -> None:
        keep = self._selected
        if self.queue_model.set_rows(rows):
            self._combos.clear()  # the reset deleted the index widgets
            self._reselect(keep)
        for r, row in enumerate(self.queue_model.rows):
            combo = self._combos.get(row.job_id)
            if row.waiting and combo is None:
                self._combos[row.job_id] = self._make_combo(row, r)
            elif combo is not None and combo.currentText() != row.priority:
                combo.blockSignals(True)
                combo.setCurrentText(row.priority)
                combo.blockSignals(False)

    def _make_combo(self, row: QueueRow, r: int) -> QComboBox:
        combo = QComboBox()
        combo.addItems(PRIORITIES)
        combo.setCurrentText(row.priority)
        combo.setToolTip("Priority: high runs before normal, normal before low")
        combo.setFocusPolicy(Qt.FocusPolicy.ClickFocus)  # no focus from the tab chain: focus selects its row
        job_id = row.job_id
        combo.currentTextChanged.connect(lambda text: self.priority_requested.emit(job_id, text))
        self.setIndexWidget(self.queue_model.index(r, PRIORITY), combo)
        return combo

    # --- reading (panel and tests) ------------------------------------------------------------------
    def job_ids(self) -> list[str]:
        return [r.job_id for r in self.queue_model.rows]

    def row(self, job_id: str) -> QueueRow | None:
        i = self.queue_model.row_of(job_id)
        return None if i is None else self.queue_model.rows[i]

    def text(self, job_id: str, column: str) -> str:
        i = self.queue_model.row_of(job_id)
        return self.queue_model.data(self.queue_model.index(i, COLUMNS.index(column))) if i is not None else ""

    def priority_combo(self, job_id: str) -> QComboBox | None:
        return self._combos.get(job_id)

    def row_rect(self, job_id: str):
        """The row's rectangle in viewport coordinates (where a drop before it lands)."""
        return self.visualRect(self.queue_model.index(self.queue_model.row_of(job_id), JOB))

    def selected_id(self) -> str | None:
        return self._selected

    def select(self, job_id: str | None) -> None:
        self._reselect(job_id)
        if job_id != self._selected:
            self._selected = job_id
            self.job_selected.emit(job_id)

    def _reselect(self, job_id: str | None) -> None:
        model = self.selectionModel()
        model.blockSignals(True)
        self.clearSelection()
        r = self.queue_model.row_of(job_id) if job_id else None
        if r is not None:  # current too: a view without one picks the first row when it gets the focus
            flags = QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
            model.setCurrentIndex(self.queue_model.index(r, JOB), flags)
        model.blockSignals(False)
        self.viewport().update()
        if r is None and self._selected is not None:
            self._selected = None  # the job left the list
            self.job_selected.emit(None)

    def _on_selection(self, *_args) -> None:
        rows = self.selectionModel().selectedRows()
        job_id = self.queue_model.rows[rows[0].row()].job_id if rows else None
        if job_id != self._selected:
            self._selected = job_id
            self.job_selected.emit(job_id)
