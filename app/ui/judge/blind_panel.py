"""Blind test view (in the Judge tab): choose the model and N, Start or Resume; then each trial's context on top and
answers A and B side by side below, picked by key (1 / 2 / 0) or button, the better answer by arrow; Stop at any
point; the share with its interval when the test is done. A view: it calls the BlindController and shows its signals."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QStackedWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.core.judge.blind.render import BlindError
from app.core.judge.blind.trials import DEFAULT_N
from app.ui.judge.blind_controller import BlindController, Done, Model, Pending
from app.ui.judge.blind_words import BETTER_WORDS, INTRO, KEYS, context_html, done_html, parts_html, resume_words, trial_words
from app.ui.kit import DIM_STYLE, GOOD, heading, splitter
from widgets.banner import Banner

REF = Qt.ItemDataRole.UserRole
BOX = "QFrame#answer {border:2px solid %s;border-radius:4px;}"
PLAIN, CHOSEN = "#3a3b42", GOOD
KEY_PICKS = {Qt.Key.Key_1: "A", Qt.Key.Key_2: "B", Qt.Key.Key_0: "cant_tell"}
KEY_BETTER = {Qt.Key.Key_Left: "A", Qt.Key.Key_Right: "B", Qt.Key.Key_Down: "same", Qt.Key.Key_Up: "same"}


def browser() -> QTextBrowser:
    """A read-only rich text view that never takes the keyboard: the keys are the test's."""
    view = QTextBrowser()
    view.setOpenLinks(False)
    view.setFocusPolicy(Qt.FocusPolicy.NoFocus)
    return view


def key_button(text: str, slot, tip: str = "", checkable: bool = False) -> QPushButton:
    made = QPushButton(text)
    made.setToolTip(tip)
    made.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # arrows and digits stay the test's keys
    made.setCheckable(checkable)
    made.clicked.connect(slot)
    return made


class AnswerBox(QFrame):
    """One answer: its letter, the answer as read (text and tool calls), framed in green when judged better."""

    def __init__(self, side: str, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("answer")
        self.side = side
        self.title = QLabel(f"Answer {side}")
        self.title.setStyleSheet("font-weight:bold;font-size:12pt;")
        self.note = QLabel()
        self.note.setStyleSheet(f"color:{CHOSEN};")
        self.view = browser()
        head = QHBoxLayout()
        head.addWidget(self.title)
        head.addStretch(1)
        head.addWidget(self.note)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 6)
        layout.addLayout(head)
        layout.addWidget(self.view, 1)
        self.mark(None)

    def mark(self, better: str | None) -> None:
        chosen = better in (self.side, "same")
        self.setStyleSheet(BOX % (CHOSEN if chosen else PLAIN))
        self.note.setText(("better" if better == self.side else "as good") if chosen else "")


class BlindPanel(QWidget):
    """The view; it subscribes to a BlindController and never touches the store."""

    def __init__(self, controller: BlindController, parent=None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.pending: Pending | None = None
        self._listed = False
        self._build()
        controller.models_changed.connect(self._on_models)
        controller.pending_changed.connect(self._on_pending)
        controller.progress.connect(self._on_progress)
        controller.trial_changed.connect(self._on_trial)
        controller.better_changed.connect(self._on_better)
        controller.finished.connect(self._on_finished)
        controller.busy_changed.connect(self._on_busy)
        controller.message.connect(self.show_message)
        self._update_buttons()

    # --- layout ----------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.banner = Banner()
        self.model_box = QComboBox()
        self.model_box.setMinimumContentsLength(44)
        self.model_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_box.setToolTip("The model whose answers are set beside the agent's: the deployed student, the "
                                  "base model or any checkpoint")
        self.model_box.currentIndexChanged.connect(self._on_model_chosen)
        self.n_box = QSpinBox()
        self.n_box.setRange(1, 500)
        self.n_box.setValue(DEFAULT_N)
        self.n_box.setToolTip("Held-out next actions to show (a resumed test keeps its own number)")
        self.start_button = key_button("Start", self.start)
        self.stop_button = key_button("Stop", self.controller.stop_test, "Stop for now (Esc): Resume goes on later")
        self.progress = QProgressBar()
        self.progress.setFormat("drawing the student's answers… %v / %m")
        self.progress.hide()
        self.status = QLabel()
        self.status.setStyleSheet("font-weight:bold;")
        setup = QHBoxLayout()
        for item in (QLabel("Model"), self.model_box, QLabel("Trials"), self.n_box, self.start_button,
                     self.stop_button):
            setup.addWidget(item)
        setup.addStretch(1)
        setup.addWidget(self.status)
        self.intro = browser()
        self.intro.setHtml(INTRO)
        self.pages = QStackedWidget()
        self.pages.addWidget(self.intro)
        self.pages.addWidget(self._trial_page())
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.banner)
        layout.addLayout(setup)
        layout.addWidget(self.progress)
        layout.addWidget(self.pages, 1)

    def _trial_page(self) -> QWidget:
        self.trial_page = QWidget()
        self.trial_page.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.context = browser()
        self.context_title = heading("Context — what the agent saw before its next action")
        top = QWidget()
        arrange = QVBoxLayout(top)
        arrange.setContentsMargins(0, 0, 0, 0)
        arrange.addWidget(self.context_title)
        arrange.addWidget(self.context, 1)
        self.answer_a, self.answer_b = AnswerBox("A"), AnswerBox("B")
        answers = splitter(Qt.Orientation.Horizontal, (self.answer_a, self.answer_b), [1000, 1000])
        split = splitter(Qt.Orientation.Vertical, (top, answers), [540, 300])
        self.pick_a = key_button("1 · A is the agent", lambda: self.controller.pick("A"))
        self.cant_tell = key_button("0 · Can't tell", lambda: self.controller.pick("cant_tell"))
        self.pick_b = key_button("2 · B is the agent", lambda: self.controller.pick("B"))
        self.better_a = key_button("← A is better", lambda: self.controller.set_better("A"), checkable=True)
        self.same = key_button("↓ Same", lambda: self.controller.set_better("same"), BETTER_WORDS["same"], True)
        self.better_b = key_button("→ B is better", lambda: self.controller.set_better("B"), checkable=True)
        self.back_button = key_button("⌫ Previous", self.controller.back, "Show the previous trial again "
                                      "(Backspace): a new answer replaces its stored one")
        picks, betters = QHBoxLayout(), QHBoxLayout()
        for row, (left, middle, right) in ((picks, (self.pick_a, self.cant_tell, self.pick_b)),
                                           (betters, (self.better_a, self.same, self.better_b))):
            row.addWidget(left, 2)
            row.addWidget(middle, 1)
            row.addWidget(right, 2)
        self.keys = QLabel(KEYS)
        self.keys.setStyleSheet(DIM_STYLE)
        self.keys.setWordWrap(True)
        foot = QHBoxLayout()
        foot.addWidget(self.keys, 1)
        foot.addWidget(self.back_button)
        layout = QVBoxLayout(self.trial_page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split, 1)
        layout.addLayout(picks)
        layout.addLayout(betters)
        layout.addLayout(foot)
        return self.trial_page

    # --- user actions ------------------------------------------------------------------------------------
    def chosen(self) -> str | None:
        return self.model_box.currentData(REF)

    def start(self) -> None:
        self.banner.hide()
        self.progress.setRange(0, 0)
        self.progress.show()
        self.controller.start(self.chosen(), self.n_box.value())

    def keyPressEvent(self, event) -> None:  # noqa: N802 - Qt's name
        """The test's keys while a trial shows: 1 / 2 / 0 pick, arrows say which answer is better, Backspace goes
        back, Esc stops."""
        key, c = event.key(), self.controller
        if c.trial is None or event.isAutoRepeat():  # a key held down answers one trial, not the next ones too
            super().keyPressEvent(event)
        elif key in KEY_PICKS:
            c.pick(KEY_PICKS[key])
        elif key in KEY_BETTER:
            c.set_better(KEY_BETTER[key])
        elif key == Qt.Key.Key_Backspace:
            c.back()
        elif key == Qt.Key.Key_Escape:
            c.stop_test()
        else:
            super().keyPressEvent(event)

    def show_message(self, level: str, text: str) -> None:
        self.banner.show_message(level, text)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        if self.controller.trial is None:
            self.controller.refresh()  # checkpoints registered, promotions made since it was last shown
        else:
            self.trial_page.setFocus()

    # --- controller -> view ---------------------------------------------------------------------------------
    def _on_models(self, models: list[Model]) -> None:
        current = self.chosen() if self._listed else None
        self.model_box.blockSignals(True)
        self.model_box.clear()
        for model in models:
            self.model_box.addItem(model.label, model.ref)
        self.model_box.setCurrentIndex(max(0, self.model_box.findData(current, REF)) if current else 0)
        self.model_box.blockSignals(False)
        self._listed = True
        self._on_model_chosen()

    def _on_model_chosen(self, *_index) -> None:
        self.pending = None
        self._update_buttons()
        self.controller.look(self.chosen())

    def _on_pending(self, pending: Pending | None) -> None:
        if pending is not None and pending.ref != self.chosen():
            return  # an answer about a model chosen before
        self.pending = pending
        self._update_buttons()

    def _on_progress(self, phase: str, step: int, total: int) -> None:
        self.progress.show()
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(min(step, max(total, 1)))
        self.progress.setFormat(f"drawing the student's answers ({phase}) %v / %m")

    def _on_trial(self, trial) -> None:
        self.progress.hide()
        if trial is None:
            self.pages.setCurrentWidget(self.intro)
            self.status.setText("")
            self.controller.look(self.chosen())
            self._update_buttons()
            return
        test = self.controller.test
        self.status.setText(trial_words(trial.position, len(test.trials), test.answered))
        try:
            view = trial.view()
            context = context_html(view.context)
        except BlindError as exc:  # a stored context with nothing to read: said, the person can still answer
            view, context = None, f"<p>{exc}</p>"
        self.context.setHtml(context)
        self.answer_a.view.setHtml(parts_html(view.a) if view else parts_html(()))
        self.answer_b.view.setHtml(parts_html(view.b) if view else parts_html(()))
        for box in (self.context, self.answer_a.view, self.answer_b.view):
            box.verticalScrollBar().setValue(0)  # read from the task down
        self.pages.setCurrentWidget(self.trial_page)
        self.trial_page.setFocus()
        self._update_buttons()

    def _on_better(self, better: str | None) -> None:
        for box in (self.answer_a, self.answer_b):
            box.mark(better)
        for button, side in ((self.better_a, "A"), (self.same, "same"), (self.better_b, "B")):
            button.setChecked(better == side)

    def _on_finished(self, done: Done) -> None:
        self.intro.setHtml(done_html(done.test.id, done.test.label, done.own, done.result))
        self.pages.setCurrentWidget(self.intro)
        self.status.setText(f"{len(done.test.trials)} of {len(done.test.trials)} answered")

    def _on_busy(self, busy: bool) -> None:
        if not busy and self.controller.trial is None:
            self.progress.hide()
        self._update_buttons()

    def _update_buttons(self) -> None:
        c = self.controller
        going = c.trial is not None
        idle = not c.busy
        self.model_box.setEnabled(not going and idle)
        self.n_box.setEnabled(not going and idle and self.pending is None)
        self.start_button.setEnabled(not going and idle and self._listed)
        self.start_button.setText(resume_words(self.pending.answered, self.pending.total) if self.pending
                                  else "Start")
        self.stop_button.setEnabled(going or c.busy)
        for button in (self.pick_a, self.cant_tell, self.pick_b, self.better_a, self.same, self.better_b):
            button.setEnabled(going)  # not off while an answer is stored: no flicker (the controller waits for it)
        self.back_button.setEnabled(going and c.trial.position > 0)
