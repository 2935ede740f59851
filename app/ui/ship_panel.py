"""Ship panel: export to GGUF (per-stage progress), deploy and roll back, Ollama / LM Studio, chat, history."""
from __future__ import annotations

from html import escape

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QGridLayout, QGroupBox, QHBoxLayout, QHeaderView,
                               QInputDialog, QLabel, QLayout, QLineEdit, QListWidget, QListWidgetItem, QProgressBar,
                               QPushButton, QSplitter, QTableWidget, QTableWidgetItem, QTextBrowser, QVBoxLayout,
                               QWidget)

from app.core.ship.config import DEFAULT_QUANT, QUANTS
from app.ui.judge_panel import DIM, heading
from app.ui.ship import STAGES, Served, ShipChoice, ShipController, local_time, model_stem
from app.ui.training_panel import BANNER_STYLE

REF = Qt.ItemDataRole.UserRole
HISTORY = ("Time", "Action", "Model", "Quant", "Note")
LEGEND = "✓ passed the gate · ✗ did not pass · – not judged · ◆ base model (no gate)"
DEPLOY_TIP = ("Gate → export → smoke test → the built-in server serves it; the previous model stays loaded for an "
              "instant rollback")


def seconds(value) -> str:
    if value is None:
        return "…"
    value = max(0, round(value))
    return f"{value // 60} min {value % 60:02d} s" if value >= 60 else f"{value} s"


def size(n: int | None) -> str:
    if not n:
        return "?"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def export_html(exp) -> str:
    """The export's files with their smoke results (size, sha256 prefix, load time, speed, the answer)."""
    lines = [f"<b>Export #{exp.row.id}</b> · {escape(exp.row.label)} · {local_time(exp.row.created_at)}"]
    for f in exp.files:
        verdict = ("✓ answers and stops" if f.get("ok") else
                   "not smoke-tested" if f.get("ok") is None else f"✗ {escape(f.get('why', ''))}")
        lines.append(f"<b>{escape(f['quant'])}</b> {escape(f['file'])} · {size(f.get('size'))} · "
                     f"sha256 {escape(str(f.get('sha256', ''))[:12])}…<br>loads in {f.get('load_s', '?')} s · "
                     f"{f.get('tokens_per_s', '?')} tok/s · {verdict}")
        if f.get("answer"):
            lines.append(f"<span style='{DIM}'>answer:</span> <i>{escape(f['answer'][:240])}</i>")
    return "<br>".join(lines)


def served_html(served: Served) -> str:
    st = served.state
    if st is None:
        what = (f"Start server serves the current deployment: {escape(served.current.note)}."
                if served.current else "Nothing deployed yet: Deploy a model to serve it.")
        return f"<b style='color:#9aa0aa'>○ Stopped</b><br>{what}"
    cur, standby = st.get("current") or {}, st.get("standby")
    loaded = f", loaded in {cur['load_s']:.2f} s" if isinstance(cur.get("load_s"), (int, float)) else ""
    label = f" — {escape(served.label)}" if served.label else ""
    keep = (f"Previous model kept loaded for instant rollback: <b>{escape(standby.get('name', '?'))}</b>"
            if standby else "No previous model loaded (Roll back loads it first)")
    return (f"<b style='color:#2ecc71'>● Running</b> at <code>{escape(st.get('url', '?'))}</code><br>"
            f"Serving <b>{escape(cur.get('name', '?'))}</b> ({escape(cur.get('quant', '') or '?')}{loaded}){label}"
            f"<br>{keep}")


def rich_label(text: str = "", style: str = "") -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setStyleSheet(style)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def button(text: str, slot, tip: str = "") -> QPushButton:
    made = QPushButton(text)
    made.setToolTip(tip)
    made.clicked.connect(slot)
    return made


def fill(layout: QLayout, *items, margins: tuple | None = None) -> QLayout:
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


def splitter(orientation, widgets: tuple, sizes: list[int], stretch: int) -> QSplitter:
    split = QSplitter(orientation)
    for widget in widgets:
        split.addWidget(widget)
    split.setStretchFactor(stretch, 1)
    split.setSizes(sizes)
    return split


class StageBars(QGroupBox):
    """One bar per export stage with its ETA; Cancel sets the running step's cancel event."""

    def __init__(self, cancel) -> None:
        super().__init__("Export progress")
        self.what, self.touched, self.bars, self.etas = "", set(), {}, {}
        self.title, self.log = QLabel("Nothing running"), rich_label(style=DIM)
        self.title.setMinimumWidth(80)  # a long label is cut rather than widening the pane
        grid = QGridLayout()
        grid.setColumnStretch(1, 1)
        for row, stage in enumerate(STAGES):
            bar, eta = self.bars[stage], self.etas[stage] = QProgressBar(), QLabel()
            bar.setTextVisible(False)
            bar.setFixedHeight(14)
            eta.setMinimumWidth(130)
            eta.setStyleSheet(DIM)
            for col, widget in enumerate((QLabel(stage), bar, eta)):
                grid.addWidget(widget, row, col)
        self.cancel_button = button("Cancel", cancel, "Stop the running export (nothing half-made is kept)")
        fill(QVBoxLayout(self), fill(QHBoxLayout(), self.title, 1, self.cancel_button), grid, self.log)
        self._clear("—")
        self.cancel_button.setEnabled(False)

    def _clear(self, text: str) -> None:
        for stage in STAGES:
            self.bars[stage].setRange(0, 1)
            self.bars[stage].setValue(0)
            self.etas[stage].setText(text)

    def reset(self, what: str) -> None:
        self.what, self.touched = what, set()
        self.title.setText(f"<b>{escape(what)}</b>…")
        self.log.clear()
        self._clear("waiting")
        self.cancel_button.setEnabled(True)

    def update_stage(self, phase: str, step: int, total: int, eta, elapsed) -> None:
        if phase not in self.bars:  # e.g. the gate's evaluation while deploying
            self.log.setText(f"{phase} {step} / {total}")
            return
        self.touched.add(phase)
        top = max(total, 1)
        self.bars[phase].setRange(0, top)
        self.bars[phase].setValue(min(step, top))
        self.etas[phase].setText(f"done in {seconds(elapsed)}" if step >= total
                                 else f"{step} / {total} · ETA {seconds(eta)}")

    def finish(self, ok: bool) -> None:
        for stage in STAGES:
            if stage not in self.touched:
                self.etas[stage].setText(("not needed" if self.touched else "reused: already exported") if ok
                                         else "—")
        self.title.setText(f"<b>{escape(self.what)}</b> — {'done' if ok else 'stopped'}")
        self.cancel_button.setEnabled(False)


class ServedBox(QGroupBox):
    """What the built-in server serves, its buttons, the API key and the latest export's smoke results."""

    def __init__(self, controller: ShipController) -> None:
        super().__init__("Served model")
        self.status = rich_label("Reading the server's state…")
        self.start_button = button("Start server", controller.start_server,
                                   "Serve the current deployment (an OpenAI-compatible API on this computer)")
        self.stop_button = button("Stop server", controller.stop_server, "Stop serving (Start server resumes)")
        self.rollback_button = button("Roll back", controller.rollback,
                                      "Serve again what the current deployment replaced")
        self.key = QLineEdit()
        self.key.setReadOnly(True)
        self.key.setToolTip("Send it as 'Authorization: Bearer KEY' to the server's /v1 API")
        self.copy_button = button("Copy", lambda: QGuiApplication.clipboard().setText(self.key.text()),
                                  "Copy the API key to the clipboard")
        self.smoke = rich_label(f"<span style='{DIM}'>No export yet.</span>")
        fill(QVBoxLayout(self), self.status,
             fill(QHBoxLayout(), self.start_button, self.stop_button, self.rollback_button, 1),
             fill(QHBoxLayout(), QLabel("API key"), self.key, self.copy_button), heading("Latest export"), self.smoke)

    def set_served(self, served: Served) -> None:
        self.status.setText(served_html(served))
        self.key.setText(served.key)

    def update_buttons(self, idle: bool, served: Served | None) -> None:
        running = served is not None and served.state is not None
        current = served.current if served else None
        self.start_button.setEnabled(idle and not running and current is not None)
        self.stop_button.setEnabled(idle and running)
        self.rollback_button.setEnabled(idle and current is not None and current.replaces_id is not None)


class ShipPanel(QWidget):
    """The view; it subscribes to a ShipController and never touches the store, the engine or the server."""

    def __init__(self, controller: ShipController, parent=None) -> None:
        super().__init__(parent)
        self.controller = controller
        self._staged = False  # an export-like step is running: its outcome finishes the stage bars
        self._build()
        controller.choices_changed.connect(self._on_choices)
        controller.served_changed.connect(lambda served: (self.served.set_served(served), self._update_buttons()))
        controller.history_changed.connect(self._on_history)
        controller.exported.connect(self._on_exported)
        controller.latest_changed.connect(lambda exp: self.served.smoke.setText(export_html(exp)))
        controller.busy_changed.connect(self._on_busy)
        controller.started.connect(self._on_started)
        controller.progress.connect(self.stages.update_stage)
        controller.log.connect(self.stages.log.setText)
        controller.chatting_changed.connect(lambda _busy: self._update_buttons())
        controller.answered.connect(self._on_answer)
        controller.message.connect(self.show_message)
        self._update_buttons()

    # --- layout --------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.banner = QLabel()
        self.banner.setWordWrap(True)
        self.banner.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.banner.setToolTip("Click to dismiss")
        self.banner.mousePressEvent = lambda _event: self.banner.hide()
        self.banner.hide()
        self.stages = StageBars(self.controller.cancel)
        self.served = ServedBox(self.controller)
        top = splitter(Qt.Orientation.Horizontal, (self._models(), self._right()), [560, 600], stretch=1)
        self.history = QTableWidget(0, len(HISTORY))
        self.history.setHorizontalHeaderLabels(HISTORY)
        self.history.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.history.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.history.verticalHeader().hide()
        header = self.history.horizontalHeader()
        for col in range(len(HISTORY) - 1):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        box = QGroupBox("Deployment history")
        fill(QVBoxLayout(box), self.history)
        fill(QVBoxLayout(self), self.banner, splitter(Qt.Orientation.Vertical, (top, box), [540, 170], stretch=0))

    def _models(self) -> QWidget:
        self.models = QListWidget()
        self.models.currentItemChanged.connect(lambda *_: self._update_buttons())
        self.quant = QComboBox()
        for n, (quant, words) in enumerate(QUANTS.items()):
            self.quant.addItem(quant, quant)
            self.quant.setItemData(n, words, Qt.ItemDataRole.ToolTipRole)
        self.quant.currentIndexChanged.connect(lambda n: self.quant.setToolTip(QUANTS[self.quant.itemData(n)]))
        self.quant.setCurrentIndex(list(QUANTS).index(DEFAULT_QUANT))
        self.quant.setToolTip(QUANTS[DEFAULT_QUANT])
        self.export_button = button("Export", self.export, "Merge, convert and quantize to GGUF, then smoke-test "
                                    "it (an identical earlier export is reused)")
        self.deploy_button = button("Deploy", self.deploy, DEPLOY_TIP)
        self.ollama_button = button("Ollama…", self.to_ollama, "Write a Modelfile next to the export's GGUF and "
                                    "register it with `ollama create`")
        self.lmstudio_button = button("LM Studio…", self.to_lmstudio, "Place the export's GGUF in LM Studio's "
                                      "models folder")
        self.refresh_button = button("Refresh", self.controller.refresh, "Read the checkpoints, the server and the "
                                     "history again")
        self.deploy_note = rich_label(style=DIM)
        actions = fill(QVBoxLayout(), QLabel("Quantization"), self.quant, self.export_button, self.deploy_button,
                       self.ollama_button, self.lmstudio_button, 1, self.refresh_button)
        for widget in (self.quant, self.export_button, self.deploy_button, self.ollama_button, self.lmstudio_button):
            widget.setFixedWidth(170)
        side = QWidget()
        fill(QVBoxLayout(side), heading("Models"), rich_label(LEGEND, DIM),
             fill(QHBoxLayout(), self.models, actions), self.deploy_note, self.stages, margins=(0, 0, 4, 0))
        return side

    def _right(self) -> QWidget:
        self.transcript = QTextBrowser()
        self.transcript.setPlaceholderText("Ask the served model something; its answers appear here.")
        self.chat_edit = QLineEdit()
        self.chat_edit.setPlaceholderText("A question for the served model")
        self.chat_edit.returnPressed.connect(self.send)
        self.chat_edit.textChanged.connect(lambda _text: self._update_buttons())
        self.send_button = button("Send", self.send)
        self.clear_button = button("Clear", self.clear_chat, "Start a new conversation")
        chat = QGroupBox("Chat with the served model")
        fill(QVBoxLayout(chat), self.transcript, fill(QHBoxLayout(), self.chat_edit, self.send_button,
                                                      self.clear_button))
        side = QWidget()
        fill(QVBoxLayout(side), self.served, chat, margins=(4, 0, 0, 0))
        return side

    # --- user actions --------------------------------------------------------------------------------
    def selected(self) -> ShipChoice | None:
        item = self.models.currentItem()
        return self.controller.choice(item.data(REF)) if item is not None else None

    def export(self) -> None:
        if choice := self.selected():
            self.controller.export(choice.ref, self.quant.currentData())

    def deploy(self) -> None:
        if (choice := self.selected()) is not None and choice.deployable:
            self.controller.deploy(choice.ref, self.quant.currentData())

    def ask_name(self, title: str, label: str, default: str) -> str | None:
        text, ok = QInputDialog.getText(self, title, label, QLineEdit.EchoMode.Normal, default)
        return text.strip() if ok and text.strip() else None

    def to_ollama(self) -> None:
        self._place(self.controller.to_ollama, "Register with Ollama",
                    "Ollama model name (lowercase letters, digits, - _ . and one :tag):", tag=True)

    def to_lmstudio(self) -> None:
        self._place(self.controller.to_lmstudio, "Export to LM Studio",
                    "Model name in LM Studio (letters, digits, - _ .):", tag=False)

    def _place(self, action, title: str, label: str, tag: bool) -> None:
        """Ask for the model's name (the export's file stem by default), then export and hand it over."""
        if (choice := self.selected()) is not None:
            quant = self.quant.currentData()
            if name := self.ask_name(title, label, model_stem(choice) + (f":{quant}" if tag else "")):
                action(choice.ref, quant, name)

    def send(self) -> None:
        text = self.chat_edit.text().strip()
        if text and self.send_button.isEnabled() and self.controller.chat(text):
            self.transcript.append(f"<p><b>You:</b> {escape(text)}</p>")
            self.chat_edit.clear()

    def clear_chat(self) -> None:
        self.controller.clear_chat()
        self.transcript.clear()

    def show_message(self, level: str, text: str) -> None:
        self.banner.setStyleSheet(BANNER_STYLE.get(level, BANNER_STYLE["info"]))
        self.banner.setText(text)
        self.banner.show()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.controller.refresh()  # checkpoints, verdicts and the server may have changed meanwhile

    # --- controller -> view ----------------------------------------------------------------------------
    def _on_choices(self, choices: list[ShipChoice]) -> None:
        current = self.models.currentItem()
        current_ref = current.data(REF) if current else None
        self.models.blockSignals(True)
        self.models.clear()
        for choice in choices:
            item = QListWidgetItem(choice.text)
            item.setData(REF, choice.ref)
            item.setToolTip(choice.why or ("the base model: exported and deployed without a gate"
                                           if choice.verdict == "base" else "passed the quality gate"))
            self.models.addItem(item)
            if choice.ref == current_ref:
                self.models.setCurrentItem(item)
        self.models.blockSignals(False)
        self._update_buttons()

    def _on_history(self, rows: list[tuple]) -> None:
        self.history.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, value in enumerate(row):
                item = QTableWidgetItem(value)
                item.setToolTip(value)
                self.history.setItem(r, c, item)

    def _on_exported(self, exp) -> None:
        self.served.smoke.setText(export_html(exp))
        self._finish_stages(True)

    def _finish_stages(self, ok: bool) -> None:
        if self._staged:
            self._staged = False
            self.stages.finish(ok)

    def _on_started(self, what: str, staged: bool) -> None:
        self.banner.hide()
        if staged:
            self._staged = True
            self.stages.reset(what)

    def _on_busy(self, busy: bool) -> None:
        if not busy:
            self._finish_stages(False)  # still staged: the step failed or was cancelled
        self._update_buttons()

    def _on_answer(self, answer: str, ok: bool) -> None:
        text = escape(answer).replace("\n", "<br>")
        self.transcript.append(f"<p><b>Model:</b> {text}</p>" if ok else f"<p style='color:#ff6b6b'>{text}</p>")

    def _update_buttons(self) -> None:
        idle, choice = not self.controller.busy, self.selected()
        for each in (self.export_button, self.ollama_button, self.lmstudio_button):
            each.setEnabled(idle and choice is not None)
        self.deploy_button.setEnabled(idle and choice is not None and choice.deployable)
        why = choice.why if choice is not None else "Select the base model or a checkpoint that passed the gate."
        self.deploy_button.setToolTip(why or DEPLOY_TIP)
        self.deploy_note.setText(f"Deploy is off: {why if len(why) < 240 else why[:237] + '…'}" if why else "")
        self.refresh_button.setEnabled(idle)
        served = self.controller.served
        self.served.update_buttons(idle, served)
        running = served is not None and served.state is not None
        self.send_button.setEnabled(running and not self.controller.chatting and bool(self.chat_edit.text().strip()))
        self.send_button.setToolTip("" if running else "Start the server (or Deploy a model) to chat with it")
