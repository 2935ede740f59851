"""Blind test controller (the Judge tab's "Blind test" view): the models to test, a test started or resumed through
`School.blind_test` on a worker thread (an evaluation's progress as it runs), one trial at a time with its pick, the
better answer and the seconds it was shown stored (judge/blind/trials.answer), stop and go on later, the figure."""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass

from PySide6.QtCore import Signal

from app.core.base import protocol
from app.core.base.store import Store
from app.core.judge.blind import figure, trials
from app.core.judge.blind.draw import model as blind_model
from app.core.judge.blind.trials import BlindTest, Trial
from app.core.runtime.school import policy
from app.core.runtime.school.facade import School
from app.ui.background import BackgroundController
from app.ui.judge.controller import read_choices, read_deployed


@dataclass(frozen=True)
class Model:
    """A model the person can test: `ref` as the School takes it (None: the deployed student), its label."""

    ref: str | None
    label: str


@dataclass(frozen=True)
class Pending:
    """The chosen model's unfinished test (None when it has none): Start resumes it."""

    ref: str | None
    test_id: int
    answered: int
    total: int


@dataclass(frozen=True)
class Done:
    """A finished test: its own figure and the model's over all its tests by this judge."""

    test: BlindTest
    own: dict
    result: dict | None


def read_models(store: Store) -> list[Model]:
    """The deployed student first (the default), then the policy's base model and each checkpoint the Judge tab
    lists."""
    base_model = policy.load(store).base_model
    choices = read_choices(store)
    deployed = read_deployed(store, choices).get(base_model, "the base model (nothing promoted yet)")
    out = [Model(None, f"Deployed student: {deployed}")]
    refs = [f"base:{base_model}"] + [c.ref for c in choices]
    labels = {c.ref: c.label for c in choices}
    for ref in dict.fromkeys(refs):
        out.append(Model(ref, labels.get(ref, f"base ({base_model})")))
    return out


def read_pending(store: Store, ref: str | None, judge: str = "person") -> Pending | None:
    target = blind_model(store, ref, policy.load(store).base_model)
    going = trials.unfinished(store, target, judge)
    return None if going is None else Pending(ref, going.id, going.answered, len(going.trials))


def read_done(store: Store, test: BlindTest) -> Done:
    own = figure.figure([(t.agent_side, t.pick, t.session_id) for t in test.trials if t.answered])
    result = figure.result_of(store, test.base_model, test.checkpoint_id, test.judge)
    return Done(test, asdict(own), result.as_dict() if result else None)


class BlindController(BackgroundController):
    """It emits, the view subscribes; the store is read and written on worker threads, one step at a time."""

    models_changed = Signal(object)  # list[Model]
    pending_changed = Signal(object)  # Pending | None for the model chosen last
    progress = Signal(str, int, int)  # an evaluation drawing the student's answers: phase, step, total
    trial_changed = Signal(object)  # Trial to show, or None: no test going
    better_changed = Signal(object)  # "A" | "B" | "same" | None
    finished = Signal(object)  # Done

    def __init__(self, store: Store, max_new_tokens: int | None = None, judge: str = "person") -> None:
        super().__init__()
        self.store, self.max_new_tokens, self.judge = store, max_new_tokens, judge
        self.school = School(store)
        self.models: list[Model] = []
        self.test: BlindTest | None = None
        self.trial: Trial | None = None
        self.better: str | None = None
        self._shown_at = 0.0
        self._going = False  # a test is started and not stopped: what comes back from the store is shown
        self._cancel = threading.Event()

    # --- reading -------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """The models, on a thread."""
        threading.Thread(target=lambda: self._post(self._on_models, (read_models(self.store),)), name="blind-list",
                         daemon=True).start()

    def _on_models(self, models: list[Model]) -> None:
        self.models = models
        self.models_changed.emit(models)

    def look(self, ref: str | None) -> None:
        """Whether `ref` has an unfinished test (`pending_changed`); a model that cannot be tested says nothing yet:
        Start says why."""
        def read():
            try:
                return read_pending(self.store, ref, self.judge)
            except Exception:  # noqa: BLE001 - said when the person presses Start
                return None
        threading.Thread(target=lambda: self._post(self.pending_changed.emit, (read(),)), name="blind-look",
                         daemon=True).start()

    # --- a test ----------------------------------------------------------------------------------------------
    def start(self, ref: str | None, n: int) -> bool:
        """Resume the model's unfinished test, else draw a new one of `n` trials (its answers evaluated first when
        no evaluation has them: `progress` meanwhile); the first unanswered trial follows."""
        if self.busy:
            self.message.emit("error", "The blind test is busy: wait for it.")
            return False
        self._set_busy(True)
        self._cancel.clear()
        self._going = True
        self._background("blind-start", lambda: self.school.blind_test(
            ref, n, self.judge, sink=self._sink, cancel=self._cancel, max_new_tokens=self.max_new_tokens),
            self._on_test, "No blind test")
        return True

    def _sink(self, env: protocol.Envelope) -> None:
        if env.type == "progress" and isinstance(env.body, protocol.Progress):
            self._post(self.progress.emit, (env.body.phase, env.body.step, env.body.total))

    def _on_test(self, test: BlindTest) -> None:
        if not self._going:
            return
        self.test = test
        if test.answered:
            self.message.emit("info", f"Blind test #{test.id} of {name_of(test)} goes on at trial "
                                      f"{test.next_trial().position + 1} of {len(test.trials)}.")
        self._show(test.next_trial())

    def _show(self, trial: Trial | None) -> None:
        if trial is None:
            self.trial = None
            self._read("blind-done", lambda: read_done(self.store, self.test), self._on_done, "Not read")
            return
        self.trial, self.better = trial, trial.better
        self._shown_at = time.monotonic()
        self.trial_changed.emit(trial)
        self.better_changed.emit(self.better)

    def set_better(self, better: str) -> None:
        """Which answer is better ("A", "B", "same"); the same again takes it back. Stored with the pick."""
        if self.trial is None or self.busy:
            return
        self.better = None if self.better == better else better
        self.better_changed.emit(self.better)

    def pick(self, pick: str) -> bool:
        """Store the shown trial's pick with the better answer and its seconds (a trial seen again adds to its
        earlier time), then show the next unanswered one."""
        trial = self.trial
        if trial is None or self.busy:
            return False
        seconds = round(time.monotonic() - self._shown_at + (trial.seconds or 0.0), 3)
        better, test_id = self.better, trial.test_id

        def work() -> BlindTest:
            trials.answer(self.store, trial.id, pick, better, seconds)
            return trials.load(self.store, test_id)
        self._read("blind-answer", work, self._on_answered, "Not stored")
        return True

    def _on_answered(self, test: BlindTest) -> None:
        if not self._going:
            return
        self.test = test
        self._show(test.next_trial())

    def back(self) -> bool:
        """Show the trial before the shown one again (its answer can be given anew)."""
        if self.trial is None or self.busy or self.trial.position == 0:
            return False
        self._show(self.test.trials[self.trial.position - 1])
        return True

    def stop_test(self) -> None:
        """Stop for now: what is answered is stored; Start (Resume) goes on at the first unanswered trial (an
        evaluation still drawing the answers is stopped)."""
        self._going = False
        self._cancel.set()
        test, self.test, self.trial = self.test, None, None
        self.trial_changed.emit(None)
        if test is not None:
            self.message.emit("info", f"Stopped blind test #{test.id}: {test.answered} of {len(test.trials)} answered; "
                                  "Resume goes on where you stopped.")

    def _read(self, name_: str, work, done, failed: str) -> None:
        self._set_busy(True)
        self._background(name_, work, done, failed)

    def _on_done(self, done: Done) -> None:
        self._going, self.test = False, None
        self.trial_changed.emit(None)
        self.finished.emit(done)

    def stop(self) -> None:
        """Window closing: an evaluation drawing answers is stopped, results in flight are dropped."""
        self._closed = True
        self._cancel.set()


def name_of(test: BlindTest) -> str:
    return "the base model" if test.checkpoint_id is None else f"checkpoint {test.label}"
