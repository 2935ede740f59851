"""Judge panel: tick models (the base and checkpoints), compare them (metric table with coloured deltas, overlaid
training-loss curves, side-by-side generations, a ranking), and promote or roll back through the gate; beside it the
blind test's view (app/ui/judge/blind_panel)."""
from __future__ import annotations

from html import escape

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.core.judge.nextaction import OUTCOME_WORDS
from app.core.judge.report import places
from app.ui.judge.blind_controller import BlindController
from app.ui.judge.blind_panel import BlindPanel
from app.ui.judge.controller import ROWS, Choice, Comparison, JudgeController, Judged, short_model
from app.ui.kit import DIM_STYLE, heading, splitter
from widgets.banner import STYLE as BANNER_STYLE, Banner
from widgets.charts import LiveChart
from widgets.compare_table import CompareTable
from widgets.side_by_side import Case, Output, SideBySide

REF = Qt.ItemDataRole.UserRole
VERDICT_STYLE = {"pass": BANNER_STYLE["info"], "fail": BANNER_STYLE["error"],
                 "inconclusive": "background:#4a3b1a;color:#ffe7b0;padding:8px;border-radius:4px;"}
VERDICT_HEAD = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}
CHECK_MARK = {"improved": "✓", "worse": "✗", "regressed": "✗", "missing": "✗"}  # else "·": no significant change


def check_items(judged: Judged) -> list[str]:
    """The verdict's lines: each check (its interval and counts in the text) marked, failures first, then notes."""
    if not judged.checks:
        return list(judged.reasons)
    ordered = sorted(judged.checks, key=lambda c: c["ok"])
    return [f"{CHECK_MARK.get(c['status'], '·')} {c['text']}" for c in ordered] + list(judged.notes)


def cases_of(comparison: Comparison) -> list[Case]:
    """One case per held-out key any model has (the reference's fixed samples first), with every model's output."""
    columns = comparison.columns
    ordered = [comparison.columns[comparison.reference], *columns]
    keys = list(dict.fromkeys(k for c in ordered for k in c.cases))
    out = []
    for key in keys:
        first = next(c.cases[key] for c in ordered if key in c.cases)
        outcomes = [c.cases.get(key, {}).get("outcome", "") for c in columns]
        outputs = [Output(c.short, c.cases[key].get("student", "") if key in c.cases else None, o,
                          OUTCOME_WORDS.get(o, o.replace("_", " "))) for c, o in zip(columns, outcomes)]
        out.append(Case(key, first.get("prompt", ""), first.get("teacher", ""), outputs))
    return out


class JudgePanel(QWidget):
    """The view; it subscribes to a JudgeController and never touches the store or the engine."""

    def __init__(self, controller: JudgeController, blind: BlindController | None = None, parent=None) -> None:
        """blind: the blind test's controller (None: one on the judge controller's store)."""
        super().__init__(parent)
        self.controller = controller
        self.blind = BlindPanel(blind or BlindController(controller.store))
        self._build()
        controller.choices_changed.connect(self._on_choices)
        controller.deployed_changed.connect(self._on_deployed)
        controller.busy_changed.connect(self._on_busy)
        controller.progress.connect(self._on_progress)
        controller.compared.connect(self._on_compared)
        controller.judged.connect(self._on_judged)
        controller.message.connect(self.show_message)
        self._update_buttons()

    # --- layout --------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.banner = Banner()
        split = splitter(Qt.Orientation.Horizontal, (self._side(), self._results()), [330, 850], stretch=1)
        compare = QWidget()
        inner = QVBoxLayout(compare)
        inner.setContentsMargins(0, 0, 0, 0)
        inner.addWidget(self.banner)
        inner.addWidget(split, 1)
        self.views = QTabWidget()
        self.views.setDocumentMode(True)
        self.views.addTab(compare, "Compare && promote")
        self.views.addTab(self.blind, "Blind test")
        self.views.setTabToolTip(1, "Can you tell the student's next action from the agent's? (keys 1 / 2 / 0)")
        layout = QVBoxLayout(self)
        layout.addWidget(self.views, 1)

    def _side(self) -> QWidget:
        self.models = QListWidget()
        self.models.itemChanged.connect(lambda _item: self._update_buttons())
        self.models.currentItemChanged.connect(lambda *_: self._update_buttons())
        self.file_edit = QLineEdit()
        self.file_edit.setPlaceholderText("default: the checkpoint's held-out set")
        self.file_edit.setToolTip("A chat JSONL of held-out sessions to evaluate on (empty: the test split of the "
                                  "dataset the checkpoint trained on, or the newest one of its base model)")
        self.file_button = QPushButton("…")
        self.file_button.setFixedWidth(32)
        self.file_button.clicked.connect(self.choose_file)
        self.compare_button = QPushButton("Compare")
        self.compare_button.clicked.connect(self.compare)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.controller.refresh)
        self.progress = QProgressBar()
        self.progress.setFormat("evaluating… %v / %m")
        self.progress.hide()
        self.ranking = QListWidget()
        self.ranking.currentItemChanged.connect(lambda *_: self._update_buttons())
        self.promote_button = QPushButton("Promote")
        self.promote_button.setToolTip("Judge the checkpoint against the base and the deployed model; only a pass "
                                       "is deployed")
        self.promote_button.clicked.connect(self.promote)
        self.rollback_button = QPushButton("Roll back")
        self.rollback_button.setToolTip("Deploy again what the current promotion replaced (or the base model)")
        self.rollback_button.clicked.connect(self.rollback)
        self.deployed = QLabel()
        self.deployed.setWordWrap(True)
        self.verdict = QTextBrowser()  # the gate's reasons can be many: it scrolls
        self.verdict.setMinimumHeight(120)
        self.verdict.hide()
        return self._side_layout()

    def _side_layout(self) -> QWidget:
        side = QWidget()
        layout = QVBoxLayout(side)
        layout.setContentsMargins(0, 0, 4, 0)
        hint = QLabel("Tick two or more models to compare; the base model is the reference when ticked.")
        hint.setWordWrap(True)
        hint.setStyleSheet(DIM_STYLE)
        file_row, buttons, actions = QHBoxLayout(), QHBoxLayout(), QHBoxLayout()
        file_row.addWidget(self.file_edit, 1)
        file_row.addWidget(self.file_button)
        buttons.addWidget(self.compare_button, 1)
        buttons.addWidget(self.refresh_button)
        actions.addWidget(self.promote_button, 1)
        actions.addWidget(self.rollback_button, 1)
        for item in (heading("Models"), hint, self.models, QLabel("Held-out set"), file_row, buttons, self.progress,
                     heading("Ranking (composite score)"), self.ranking, actions, self.deployed, self.verdict):
            layout.addLayout(item) if isinstance(item, QHBoxLayout) else layout.addWidget(item)
        layout.setStretchFactor(self.models, 2)
        layout.setStretchFactor(self.ranking, 1)
        layout.setStretchFactor(self.verdict, 3)
        return side

    def _results(self) -> QWidget:
        self.table = CompareTable(empty="Tick two or more models and press Compare: their held-out loss, next-action "
                                        "agreement, tool-call validity and reward appear here side by side.")
        self.chart = LiveChart("Training loss", "loss", [], legend="title")
        self.chart.setToolTip("The training loss of each compared checkpoint's job, up to the checkpoint's step")
        self.chart.set_notice("Compare checkpoints to overlay their training loss")
        self.side_by_side = SideBySide()
        top = splitter(Qt.Orientation.Horizontal, (self.table, self.chart), [500, 360])
        return splitter(Qt.Orientation.Vertical, (top, self.side_by_side), [300, 380])

    # --- user actions --------------------------------------------------------------------------------
    def checked(self) -> list[str]:
        return [self.models.item(n).data(REF) for n in range(self.models.count())
                if self.models.item(n).checkState() == Qt.CheckState.Checked]

    def set_checked(self, refs: list[str]) -> None:
        for n in range(self.models.count()):
            item = self.models.item(n)
            item.setCheckState(Qt.CheckState.Checked if item.data(REF) in refs else Qt.CheckState.Unchecked)

    def choose_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Held-out chat file", "", "JSONL (*.jsonl);;All (*)")
        if path:
            self.file_edit.setText(path)

    def compare(self) -> None:
        self.controller.file = self.file_edit.text().strip() or None
        self.controller.compare(self.checked())

    def candidate(self) -> str | None:
        """The checkpoint to promote: the one selected in the ranking, else the current one in the model list."""
        for item in (self.ranking.currentItem(), self.models.currentItem()):
            if item is not None and item.data(REF).startswith("#"):
                return item.data(REF)
        return None

    def base_model(self) -> str | None:
        """Whose deployment Roll back changes: the compared base model, else that of the ticked or current model."""
        if self.controller.comparison is not None:
            return self.controller.comparison.base_model
        refs = self.checked() or ([self.models.currentItem().data(REF)] if self.models.currentItem() else [])
        found = [c.base_model for c in self.controller.choices if c.ref in refs]
        models = list(dict.fromkeys(c.base_model for c in self.controller.choices))
        return found[0] if found else (models[0] if len(models) == 1 else None)

    def promote(self) -> None:
        if ref := self.candidate():
            self.controller.file = self.file_edit.text().strip() or None
            self.verdict.hide()
            self.controller.promote(ref)

    def rollback(self) -> None:
        if model := self.base_model():
            self.controller.rollback(model)

    def show_message(self, level: str, text: str) -> None:
        self.banner.show_message(level, text)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.controller.refresh()  # checkpoints registered since the tab was last shown

    # --- controller -> view ----------------------------------------------------------------------------
    def _on_choices(self, choices: list[Choice]) -> None:
        ticked, current = set(self.checked()), self.models.currentItem()
        current_ref = current.data(REF) if current else None
        self.models.blockSignals(True)
        self.models.clear()
        for choice in choices:
            item = QListWidgetItem(choice.label)
            item.setData(REF, choice.ref)
            item.setToolTip(f"{choice.ref} · base model {choice.base_model}")
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if choice.ref in ticked else Qt.CheckState.Unchecked)
            self.models.addItem(item)
            if choice.ref == current_ref:
                self.models.setCurrentItem(item)
        self.models.blockSignals(False)
        self._update_buttons()

    def _on_deployed(self, deployed: dict) -> None:
        lines = [f"<b>Deployed</b> for {escape(short_model(m))}: {escape(label)}" for m, label in deployed.items()]
        self.deployed.setText("<br>".join(lines) or "<b>Deployed</b>: nothing yet")

    def _on_busy(self, busy: bool) -> None:
        self.progress.setVisible(busy)
        self.progress.setRange(0, 0)  # busy until the first progress says how far
        self._update_buttons()

    def _on_progress(self, phase: str, step: int, total: int) -> None:
        self.progress.setFormat(f"{phase} %v / %m")
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(min(step, max(total, 1)))
        self.progress.setFormat(f"evaluating ({phase}) %v / %m")

    def _on_compared(self, comparison: Comparison) -> None:
        columns = comparison.columns
        self.table.set_data(ROWS, [(c.short, {**c.metrics, "score": c.score}) for c in columns],
                            comparison.reference)
        self._show_curves(comparison)
        self.side_by_side.set_cases(cases_of(comparison))
        self.ranking.clear()
        ranked = places([c.score for c in comparison.ranking])
        for column, place in zip(comparison.ranking, ranked):
            tie = " (tie)" if ranked.count(place) > 1 else ""
            item = QListWidgetItem(f"{place}. {column.label} — {column.score:.3f}{tie}")
            item.setData(REF, column.ref)
            self.ranking.addItem(item)
        self._update_buttons()

    def _show_curves(self, comparison: Comparison) -> None:
        self.chart.clear_all()
        curves = [c for c in comparison.columns if c.curve[0]]
        for column in curves:
            self.chart.set_series(column.short, *column.curve)
        self.chart.set_notice("" if curves else "No training loss recorded for these models")

    def _on_judged(self, judged: Judged) -> None:
        head = VERDICT_HEAD.get(judged.verdict, judged.verdict)
        what = "promoted" if judged.promoted else (
            "not promoted: the evidence does not show it is better" if judged.verdict == "inconclusive"
            else "not promoted")
        items = "".join(f"<li>{escape(r)}</li>" for r in check_items(judged))
        self.verdict.setStyleSheet(VERDICT_STYLE.get(judged.verdict, BANNER_STYLE["error"]))
        items = f"<ul style='-qt-list-indent:1'>{items}</ul>"
        self.verdict.setText(f"<b>{head}</b> — {escape(judged.label)} {what}{items}")
        self.verdict.show()

    def _update_buttons(self) -> None:
        idle = not self.controller.busy
        self.compare_button.setEnabled(idle and len(self.checked()) >= 2)
        self.promote_button.setEnabled(idle and self.candidate() is not None)
        self.rollback_button.setEnabled(idle and self.base_model() is not None)
        self.refresh_button.setEnabled(idle)
