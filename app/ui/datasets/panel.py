"""Datasets panel: built datasets, the build form with live progress, and a dataset's report and token preview."""
from __future__ import annotations

import json
from html import escape
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.core.datasets.splits import SPLITS
from app.ui.datasets.controller import DatasetsController, Details, Preview
from app.ui.datasets.form import BuildForm
from app.ui.datasets.words import PASSED, PROBLEM, report_html
from app.ui.kit import FAINT, fill, key_at, local_time, make_table, reselect, splitter
from widgets.banner import Banner
from widgets.token_preview import TokenPreview

COLUMNS = ["Name", "Kind", "Base model", "Splits", "Excluded", "Created", "Fingerprint"]
HEADER_TIPS = {3: "examples in train / val / test", 4: "examples excluded by the checks",
               6: "content fingerprint: the same examples rendered by the same template give the same one"}


def short_model(label: str) -> str:
    return Path(label).name if "/" in label else label


class DatasetsPanel(QWidget):
    """The view; it re-reads the registry when the controller says the list changed."""

    def __init__(self, controller: DatasetsController, parent=None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.selected: str | None = None
        self.rows: dict = {}
        self.preview: Preview | None = None
        self.details: Details | None = None
        self.failed_with: tuple[int, int] | None = None  # the sessions stored when the shown build failure happened
        self._build()
        controller.changed.connect(self.refresh)
        controller.finished.connect(self._on_finished)
        controller.verified.connect(self._on_verified)
        controller.message.connect(self.show_message)
        self.refresh()

    # --- layout ------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.banner = Banner()
        self.table = make_table(COLUMNS, 2)  # the base model stretches
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a long name keeps its ends; the tooltip has it all
        self.table.itemSelectionChanged.connect(self._on_select)
        for column, tip in HEADER_TIPS.items():
            self.table.horizontalHeaderItem(column).setToolTip(tip)
        self.form = BuildForm(self.controller)
        self.form.problem.connect(self._on_problem)
        self.controller.building.connect(self._on_building)
        left = splitter(Qt.Orientation.Vertical, (self.table, self.form), [330, 380])
        split = splitter(Qt.Orientation.Horizontal, (left, self._detail()), [600, 580])
        layout = QVBoxLayout(self)
        layout.addWidget(self.banner)
        layout.addWidget(split, 1)

    def _detail(self) -> QWidget:
        self.title = QLabel("No dataset selected: build one, or pick one from the list.")
        self.title.setWordWrap(True)
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.integrity = QLabel()
        self.integrity.setWordWrap(True)
        self.report = QTextBrowser()
        self.report.setPlaceholderText("Pick a dataset to read its report: what each filter removed, the splits, "
                                       "the examples excluded and why.")
        self.report.setOpenLinks(False)
        report_tab = QWidget()
        col = QVBoxLayout(report_tab)
        col.addWidget(self.integrity)
        col.addWidget(self.report, 1)
        self.detail_tabs = QTabWidget()
        self.detail_tabs.addTab(report_tab, "Report")
        self.detail_tabs.addTab(self._preview_tab(), "Preview")
        self.detail_tabs.currentChanged.connect(self.show_example)
        right = QWidget()
        box = QVBoxLayout(right)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.title)
        box.addWidget(self.detail_tabs, 1)
        return right

    def _preview_tab(self) -> QWidget:
        self.split_box = QComboBox()
        self.split_box.currentIndexChanged.connect(self._on_split)
        self.index = QSpinBox()
        self.index.setMinimum(1)
        self.index.valueChanged.connect(self.show_example)
        self.of_label = QLabel()
        prev, nxt = QPushButton("◀"), QPushButton("▶")
        for button in (prev, nxt):
            button.setFixedWidth(34)
        prev.clicked.connect(self.index.stepDown)
        nxt.clicked.connect(self.index.stepUp)
        row = QHBoxLayout()
        for w in (QLabel("Split"), self.split_box, QLabel("Example"), self.index, self.of_label, prev, nxt):
            row.addWidget(w)
        row.addStretch(1)
        self.example_meta = QLabel()
        self.example_meta.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.example_meta.setWordWrap(True)
        self.tokens = TokenPreview()
        tab = QWidget()
        col = QVBoxLayout(tab)
        col.addLayout(row)
        col.addWidget(self.example_meta)
        col.addWidget(self.tokens, 1)
        return tab

    # --- list ----------------------------------------------------------------------------------------
    def refresh(self) -> None:
        rows = self.controller.datasets()
        self.rows = {r.name: r for r in rows}
        fill(self.table, [[r.name, r.kind, short_model(model_label(r)), f"{r.train} / {r.val} / {r.test}",
                           r.excluded, local_time(r.created_at), r.fingerprint[:8]] for r in rows],
             [r.name for r in rows])
        for i, r in enumerate(rows):
            self.table.item(i, 2).setToolTip(model_label(r))
            self.table.item(i, 6).setToolTip(r.fingerprint)
        reselect(self.table, self.selected)
        self._show_sessions()

    def _show_sessions(self) -> None:
        """The count of sessions to build from; a build failure shown since goes once the sessions change (it was
        about the sessions there were: "0 sessions stored" no longer holds when some arrive)."""
        stored = self.controller.sessions_stored()
        self.form.set_sessions(*stored)
        if self.failed_with is not None and stored != self.failed_with:
            self.failed_with = None
            self.banner.hide()

    def select(self, name: str) -> None:
        reselect(self.table, name)
        self._on_select()

    def _on_select(self) -> None:
        name = key_at(self.table)
        if name in self.rows and name != self.selected:
            self.show_dataset(self.rows[name])

    def show_dataset(self, row) -> None:
        """Read the dataset's manifest and report (the preview line only when the Preview tab shows)."""
        self.selected = row.name
        self.details = details = self.controller.details(row)
        man = details.manifest
        label = man.base_model_label if man else row.base_model
        self.title.setText(f"<b>{escape(row.name)}</b> · {escape(row.kind)} · {escape(row.mode)} · "
                           f"{row.examples:,} examples · base model {escape(short_model(label))}")
        self.title.setToolTip(row.path)
        self.report.setHtml(report_html(details))
        self.integrity.setStyleSheet(f"color:{FAINT};")
        self.integrity.setText("Checking integrity (sha256 of every file against the manifest)…")
        self.controller.verify(row.name, row.path)
        self.preview = Preview(details.folder, details.sizes())
        self._fill_splits(details.sizes())

    def _on_verified(self, name: str, problems: list[str]) -> None:
        if name != self.selected:
            return
        ok = not problems
        files = len(self.details.manifest.files) if ok and self.details and self.details.manifest else 0
        self.integrity.setStyleSheet(f"color:{PASSED if ok else PROBLEM};")
        self.integrity.setText(f"✓ Intact: all {files} files match the manifest." if ok else
                               "✗ Integrity problems: " + "; ".join(escape(p) for p in problems[:8]))

    # --- preview ---------------------------------------------------------------------------------------
    def _fill_splits(self, sizes: dict[str, int]) -> None:
        self.split_box.blockSignals(True)
        self.split_box.clear()
        for s in SPLITS:
            self.split_box.addItem(f"{s} ({sizes.get(s, 0):,})", s)
        first = next((i for i, s in enumerate(SPLITS) if sizes.get(s)), 0)
        self.split_box.setCurrentIndex(first)
        self.split_box.blockSignals(False)
        self._on_split()

    def _on_split(self) -> None:
        count = self.preview.sizes.get(self.split_box.currentData(), 0) if self.preview else 0
        self.index.blockSignals(True)
        self.index.setMaximum(max(count, 1))
        self.index.setValue(1)
        self.index.setEnabled(count > 0)
        self.index.blockSignals(False)
        self.of_label.setText(f"of {count:,}")
        self.show_example()

    def show_example(self, *_changed) -> None:
        """Read and render one example, only while the Preview tab is the one shown."""
        if self.detail_tabs.currentIndex() != 1 or self.preview is None:
            return
        split = self.split_box.currentData()
        if not self.preview.sizes.get(split):
            self.example_meta.setText("")
            self.tokens.clear(f"The {split} split has no examples.")
            return
        ex = self.preview.example(split, self.index.value() - 1)
        meta = f"id {ex.id}" + (f" · session {ex.session_id} · window {ex.window} · {ex.source}" if ex.session_id
                                else "")
        self.example_meta.setText(escape(meta) + (f"<br><span style='color:{PROBLEM}'>{escape(ex.problem)}</span>"
                                                  if ex.problem else ""))
        if ex.segments:
            self.tokens.set_segments(ex.segments, ex.tokens, ex.trained)
        else:
            self.tokens.clear(ex.problem or "This example has no rendering.")

    def _on_finished(self, outcome) -> None:
        self.failed_with = None if outcome.ok else self.controller.sessions_stored()
        if outcome.ok:
            self.refresh()
            self.selected = None  # re-read even when it was shown (an identical build points at it)
            self.select(outcome.name)

    def showEvent(self, event) -> None:
        """The captured-session count is re-read whenever the tab comes into view."""
        self._show_sessions()
        super().showEvent(event)

    # Slots are methods, never lambdas over self: a lambda held by the controller's signal would keep this panel
    # alive until interpreter shutdown, where PySide6 aborts (see ARCHITECTURE.md, Decisions).
    def _on_problem(self, text: str) -> None:
        self.show_message("error", text)

    def _on_building(self, on: bool) -> None:
        if on:
            self.failed_with = None
            self.banner.hide()

    def show_message(self, level: str, text: str) -> None:
        self.banner.show_message(level, text)


def model_label(row) -> str:
    """The base model's label from the manifest kept in the row, else its reference."""
    try:
        return json.loads(row.manifest_json).get("base_model_label") or row.base_model
    except (TypeError, ValueError):
        return row.base_model
