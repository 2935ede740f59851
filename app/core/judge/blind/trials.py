"""A blind test's record, for the terminal and the window alike: `start` draws and stores a test (the order and sides
from the test's own seed), `unfinished` / `load` give it back to go on at its first unanswered trial, `answer`
stores a pick, the better answer and the seconds taken; each trial keeps its context, the agent's and the student's
text, so it can become a preference pair later."""
from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select

from app.core.base.schema import BlindTestRow, BlindTrialRow, utcnow
from app.core.base.schema.blind import student_was
from app.core.base.store import Store
from app.core.judge.blind import render
from app.core.judge.blind.draw import answers, draw
from app.core.judge.blind.render import BlindError
from app.core.judge.evaluate import Sink
from app.core.judge.records import Target
from app.core.judge.report import EvalSettings

PICKS = ("A", "B", "cant_tell")
BETTER = ("A", "B", "same")
JUDGES = ("person", "teacher")
DEFAULT_N = 20


@dataclass(frozen=True)
class TrialView:
    """What a person is shown of a trial: the context and the two answers, A and B."""

    context: render.ContextView
    a: tuple[render.Part, ...]
    b: tuple[render.Part, ...]


@dataclass
class Trial:
    id: int
    test_id: int
    position: int
    key: str
    session_id: str
    turn: int
    messages: list[dict]
    teacher: str
    student: str
    outcome: str
    agent_side: str
    pick: str | None = None
    better: str | None = None
    seconds: float | None = None
    answered_at: datetime | None = None

    @property
    def answered(self) -> bool:
        return self.pick is not None

    @property
    def sides(self) -> dict[str, str]:
        """The raw text of answer A and answer B."""
        return {"A": self.teacher, "B": self.student} if self.agent_side == "A" else {"A": self.student,
                                                                                       "B": self.teacher}

    @property
    def correct(self) -> bool | None:
        """Whether the pick named the agent's answer (None: not answered; can't tell is not correct)."""
        return None if self.pick is None else self.pick == self.agent_side

    @property
    def student_was(self) -> str | None:
        """The judge's word on the student's answer: "worse", "better", "same" (None: not said)."""
        return student_was(self.agent_side, self.better)

    def view(self) -> TrialView:
        return TrialView(render.context(self.messages), render.answer(self.sides["A"]),
                         render.answer(self.sides["B"]))


@dataclass
class BlindTest:
    id: int
    base_model: str
    checkpoint_id: int | None
    label: str
    judge: str
    eval_id: int | None
    eval_set: str
    seed: int
    created_at: datetime | None
    finished_at: datetime | None
    trials: list[Trial] = field(default_factory=list)

    @property
    def answered(self) -> int:
        return sum(t.answered for t in self.trials)

    @property
    def done(self) -> bool:
        return all(t.answered for t in self.trials)

    def next_trial(self) -> Trial | None:
        """The first unanswered trial in the order shown (None: the test is finished)."""
        return next((t for t in self.trials if not t.answered), None)


def _trial(row: BlindTrialRow) -> Trial:
    return Trial(row.id, row.test_id, row.position, row.context_key, row.session_id, row.turn,
                 json.loads(row.context_json), row.teacher, row.student, row.outcome, row.agent_side, row.pick,
                 row.better, row.seconds, row.answered_at)


def load(store: Store, test_id: int) -> BlindTest:
    """A stored blind test with its trials in the order shown."""
    with store.session() as s:
        row = s.get(BlindTestRow, test_id)
        if row is None:
            raise BlindError(f"there is no blind test {test_id}", fix="see `nightschool judge blind --results`")
        trials = [_trial(t) for t in s.scalars(select(BlindTrialRow).where(BlindTrialRow.test_id == test_id)
                                               .order_by(BlindTrialRow.position))]
        return BlindTest(row.id, row.base_model, row.checkpoint_id, row.label, row.judge, row.eval_id, row.eval_set,
                         row.seed, row.created_at, row.finished_at, trials)


def _of(target: Target, judge: str):
    model = BlindTestRow.checkpoint_id.is_(None) if target.is_base else BlindTestRow.checkpoint_id == target.id
    return select(BlindTestRow).where(BlindTestRow.base_model == target.base_model, model, BlindTestRow.judge == judge)


def unfinished(store: Store, target: Target, judge: str = "person") -> BlindTest | None:
    """The newest blind test of this model by this judge that still has unanswered trials (None: none)."""
    with store.session() as s:
        found = s.scalar(_of(target, judge).where(BlindTestRow.finished_at.is_(None)).order_by(BlindTestRow.id.desc()))
    return load(store, found.id) if found is not None else None


def shown(store: Store, target: Target, judge: str = "person") -> set[str]:
    """The context keys earlier blind tests of this model by this judge showed."""
    with store.session() as s:
        ids = select(_of(target, judge).subquery().c.id)
        return set(s.scalars(select(BlindTrialRow.context_key).where(BlindTrialRow.test_id.in_(ids))))


def start(store: Store, target: Target, settings: EvalSettings, n: int = DEFAULT_N, judge: str = "person",
          sink: Sink | None = None, cancel: threading.Event | None = None) -> BlindTest:
    """A new blind test of `target`: the student's answers (served decoding: draw.answers), `n` next actions drawn
    with the test's seed (its id), in a shuffled order, the agent's answer on side A or B by a coin of that seed."""
    if judge not in JUDGES:
        raise BlindError(f"no judge {judge!r}", fix="a blind test is judged by a person or the teacher")
    if n < 1:
        raise BlindError(f"a blind test of {n} trials shows nothing", fix="ask for at least one (--n 20)")
    found = answers(store, target, settings, sink, cancel)
    seen = shown(store, target, judge)
    with store.session() as s:
        row = BlindTestRow(base_model=target.base_model, checkpoint_id=target.id, label=target.label,
                           eval_id=found.row.id, eval_set=found.evset.name, eval_set_sha256=found.evset.sha256,
                           judge=judge, seed=0)
        s.add(row)
        s.flush()
        row.seed = row.id
        rng = random.Random(f"blind:{row.id}")
        picked = draw(found, n, row.id, seen)
        rng.shuffle(picked)
        for position, ctx in enumerate(picked):
            gen = found.rows[ctx.key]
            s.add(BlindTrialRow(test_id=row.id, position=position, context_key=ctx.key, session_id=ctx.session_id,
                                turn=ctx.turn, context_json=json.dumps(ctx.messages, ensure_ascii=False),
                                teacher=gen["teacher"], student=gen["student"], outcome=gen.get("outcome", ""),
                                agent_side=rng.choice("AB")))
        test_id = row.id
    return load(store, test_id)


def answer(store: Store, trial_id: int, pick: str, better: str | None = None,
           seconds: float | None = None) -> Trial:
    """Store a trial's answer (again: a later answer replaces it); the test is finished with its last trial."""
    if pick not in PICKS:
        raise BlindError(f"{pick!r} is no pick", fix="pick 'A' or 'B' (the agent's answer) or 'cant_tell'")
    if better not in (None, *BETTER):
        raise BlindError(f"{better!r} is no better answer", fix="say 'A', 'B' or 'same', or nothing")
    if seconds is not None and not seconds >= 0:
        raise BlindError(f"{seconds!r} seconds is no time taken", fix="give the seconds the trial took (0 or more)")
    with store.session() as s:
        row = s.get(BlindTrialRow, trial_id)
        if row is None:
            raise BlindError(f"there is no blind trial {trial_id}", fix="load the test again")
        row.pick, row.better, row.seconds, row.answered_at = pick, better, seconds, utcnow()
        s.flush()
        left = s.scalar(select(BlindTrialRow.id).where(BlindTrialRow.test_id == row.test_id,
                                                       BlindTrialRow.pick.is_(None)).limit(1))
        test = s.get(BlindTestRow, row.test_id)
        if left is None and test.finished_at is None:
            test.finished_at = utcnow()
        return _trial(row)
