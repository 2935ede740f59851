"""The blind test's figure: the indistinguishable share (answered trials where the judge did not pick the agent's
answer: a wrong pick or "can't tell") per model and judge, with a session-level 95 % interval (stats.ratio_interval,
whole sessions resampled); 50 % is chance, more than 45 % the product's goal."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from sqlalchemy import select

from app.core.base.schema import BlindTestRow, BlindTrialRow
from app.core.base.store import Store
from app.core.judge.stats import ratio_interval

GOAL = 0.45  # more than this share indistinguishable: the product's long-term target
CHANCE = 0.5  # a judge who guesses
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Figure:
    """The share of `trials` answered ones that were indistinguishable, its interval (None with fewer than two
    sessions: one session cannot show how another would go), the sessions behind them."""

    trials: int
    indistinguishable: int
    share: float | None
    low: float | None
    high: float | None
    sessions: int
    confidence: float = CONFIDENCE


def figure(picks: Iterable[tuple[str, str, str]], resamples: int = 2000, seed: int = 0) -> Figure:
    """From (agent side, pick, session id) of each answered trial: the share whose pick was not the agent's side,
    and its cluster bootstrap interval by session, kept within 0…1."""
    picks = list(picks)
    units = [(0.0 if pick == side else 1.0, 1.0) for side, pick, _ in picks]
    sessions = [session for *_, session in picks]
    hits = int(sum(u for u, _ in units))
    if not units:
        return Figure(0, 0, None, None, None, 0)
    interval = ratio_interval(units, resamples, seed, CONFIDENCE, clusters=sessions)
    low, high = (max(0.0, interval.low), min(1.0, interval.high)) if interval else (None, None)
    return Figure(len(units), hits, hits / len(units), low, high, len(set(sessions)))


@dataclass(frozen=True)
class Result:
    """One model's figure by one judge over all its blind tests."""

    label: str
    base_model: str
    checkpoint_id: int | None
    judge: str
    tests: int
    unanswered: int
    figure: Figure
    last_test: int

    @property
    def reached(self) -> bool | None:
        """Whether the share is above the goal (None: nothing answered)."""
        return None if self.figure.share is None else self.figure.share > GOAL

    def as_dict(self) -> dict:
        return {"model": self.label, "base_model": self.base_model, "checkpoint_id": self.checkpoint_id,
                "judge": self.judge, "tests": self.tests, "last_test": self.last_test, "unanswered": self.unanswered,
                **asdict(self.figure), "goal": GOAL, "chance": CHANCE, "reached": self.reached}


def results(store: Store, judge: str | None = None) -> list[Result]:
    """Each model's figure (per judge; `judge` for one of them), the model tested last first. Reads the picks only,
    never the trials' texts."""
    t, r = BlindTestRow, BlindTrialRow
    q = select(t.id, t.label, t.base_model, t.checkpoint_id, t.judge, r.agent_side, r.pick, r.session_id).join(
        r, r.test_id == t.id)
    if judge is not None:
        q = q.where(t.judge == judge)
    with store.session() as s:
        rows = s.execute(q.order_by(t.id, r.position)).all()
    groups: dict[tuple, list] = {}
    for row in rows:
        groups.setdefault((row.base_model, row.checkpoint_id, row.judge), []).append(row)
    out = []
    for (base_model, checkpoint_id, who), found in groups.items():
        answered = [(x.agent_side, x.pick, x.session_id) for x in found if x.pick is not None]
        out.append(Result(found[-1].label, base_model, checkpoint_id, who, len({x.id for x in found}),
                          len(found) - len(answered), figure(answered), found[-1].id))
    return sorted(out, key=lambda res: -res.last_test)


def result_of(store: Store, base_model: str, checkpoint_id: int | None, judge: str = "person") -> Result | None:
    """One model's figure by `judge` (None: never tested)."""
    return next((r for r in results(store, judge) if r.base_model == base_model and r.checkpoint_id == checkpoint_id),
                None)


def of_checkpoint(store: Store, checkpoint_id: int | None) -> list[dict]:
    """Every judge's figure for a checkpoint, as data (a report card's `blind`); [] when none was tested."""
    if checkpoint_id is None:
        return []
    return [r.as_dict() for r in results(store) if r.checkpoint_id == checkpoint_id]


def percent(share: float) -> str:
    """A share as the app writes it: 0.425 -> "42 %"."""
    return f"{share * 100:.0f} %"


def words(result: dict) -> str:
    """A figure as one line: "#12 …: 42 % indistinguishable (95 % CI 30–55 %), 20 trials, 7 sessions, by a person —
    goal above 45 %, chance 50 %"."""
    if result.get("share") is None:
        return f"{result['model']}: no trial answered yet ({result['unanswered']} waiting)"
    ci = (f" (95 % CI {result['low'] * 100:.0f}–{percent(result['high'])})" if result.get("low") is not None
          else " (no interval: one session)")
    who = "a person" if result["judge"] == "person" else "the teacher"
    return (f"{result['model']}: {percent(result['share'])} indistinguishable{ci}, {result['trials']} trials, "
            f"{result['sessions']} sessions, by {who} — goal above {percent(GOAL)}, chance {percent(CHANCE)}")
