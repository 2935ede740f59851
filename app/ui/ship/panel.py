"""Ship panel: export to GGUF (per-stage progress), deploy and roll back, Ollama / LM Studio, the agent tools it is
used in, chat, history."""
from __future__ import annotations

from html import escape

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.core.ship.config import DEFAULT_QUANT, QUANTS
from app.ui.kit import DIM_STYLE, arrange, button, heading, label, splitter
from app.ui.ship.controller import ShipChoice, ShipController, model_stem
from app.ui.ship.boxes import ServedBox, StageBars, export_html
from app.ui.ship.connect import ConnectBox
from widgets.banner import Banner

REF = Qt.ItemDataRole.UserRole
HISTORY = ("Time", "Action", "Model", "Quant", "Note")
LEGEND = "✓ passed the gate · ✗ did not pass · – not judged · ◆ base model (no gate)"
DEPLOY_TIP = ("Gate → export → smoke test → the built-in server serves it; the previous model stays loaded for an "
              "instant rollback")
class ShipPanel(QWidget):
    """The view; it subscribes to a ShipController and never touches the store, the engine or the server."""

    def __init__(self, controller: ShipController, parent=None) -> None:
        super().__init__(parent)
        self.controller = controller
        self._staged = False  # an export-like step is running: its outcome finishes the stage bars
        self._build()
        controller.choices_changed.connect(self._on_choices)
        # Slots are methods, never lambdas over self (a lambda held by the controller's signal keeps the panel alive
        # until interpreter shutdown, where PySide6 aborts: ARCHITECTURE.md, Decisions).
        controller.served_changed.connect(self._on_served)
        controller.history_changed.connect(self._on_history)
        controller.exported.connect(self._on_exported)
        controller.latest_changed.connect(self._on_latest)
        controller.busy_changed.connect(self._on_busy)
        controller.started.connect(self._on_started)
        controller.progress.connect(self.stages.update_stage)
        controller.log.connect(self.stages.log.setText)
        controller.chatting_changed.connect(self._on_chatting)
        controller.answered.connect(self._on_answer)
        controller.message.connect(self.show_message)
        controller.connections.message.connect(self.show_message)
        self._update_buttons()

    # --- layout --------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.banner = Banner()
        self.stages = StageBars(self.controller.cancel)
        self.served = ServedBox(self.controller)
        self.use_in = ConnectBox(self.controller.connections)
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
        arrange(QVBoxLayout(box), self.history)
        arrange(QVBoxLayout(self), self.banner, splitter(Qt.Orientation.Vertical, (top, box), [540, 170], stretch=0))

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
        self.deploy_note = label(style=DIM_STYLE, selectable=True)
        actions = arrange(QVBoxLayout(), QLabel("Quantization"), self.quant, self.export_button, self.deploy_button,
                          self.ollama_button, self.lmstudio_button, 1, self.refresh_button)
        for widget in (self.quant, self.export_button, self.deploy_button, self.ollama_button, self.lmstudio_button):
            widget.setFixedWidth(170)
        side = QWidget()
        arrange(QVBoxLayout(side), heading("Models"), label(LEGEND, DIM_STYLE, selectable=True),
                arrange(QHBoxLayout(), self.models, actions), self.deploy_note, self.stages, margins=(0, 0, 4, 0))
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
        arrange(QVBoxLayout(chat), self.transcript, arrange(QHBoxLayout(), self.chat_edit, self.send_button,
                                                            self.clear_button))
        side = QWidget()
        arrange(QVBoxLayout(side), self.served, self.use_in, chat, margins=(4, 0, 0, 0))
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
        self.banner.show_message(level, text)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.controller.refresh()  # checkpoints, verdicts and the server may have changed meanwhile

    # --- controller -> view ----------------------------------------------------------------------------
    def _on_served(self, served) -> None:
        self.served.set_served(served)
        self._update_buttons()

    def _on_latest(self, exp) -> None:
        self.served.smoke.setText(export_html(exp))

    def _on_chatting(self, _busy: bool) -> None:
        self._update_buttons()

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
