"""The blind test judged by a machine: the teacher (the experience feature's OpenAI-compatible endpoint) shown each
trial as the text a person reads, asked which answer is the agent's and which is better, a strict JSON answer (a
malformed one asked again once, then stored as "can't tell", and said); its tests are stored apart (judge "teacher")."""
from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from app.core.base.store import Store
from app.core.experience import teacher
from app.core.judge.blind.render import BlindError, plain_context, plain_parts
from app.core.judge.blind.trials import BETTER, PICKS, BlindTest, Trial, answer
from app.core.toolcalls.convention import text_of

JUDGE = "teacher"
MAX_TOKENS = 200  # the answer is a short JSON object; room for a model that writes a word before it
SYSTEM = ("You judge a blind test. A coding agent was working in a session; you are shown what it saw before its "
          "next action, and two answers: one is the agent's recorded next action, the other a smaller model's answer "
          "to the same context, in a random order. Say which answer is the agent's (or cant_tell), and which answer "
          "is better for the task (or same). Reply with one JSON object and nothing else: "
          '{"agent": "A" | "B" | "cant_tell", "better": "A" | "B" | "same"}')
AGAIN = ('That is not the answer asked for. Reply with the JSON object only, for example '
         '{"agent": "A", "better": "same"}')
_ANSWER = re.compile(r"\s*(?:```(?:json)?\s*)?(\{[^{}]*\})\s*(?:```)?\s*", re.DOTALL)


def prompt(trial: Trial) -> list[dict]:
    """The trial as a chat: the protocol, then the context and answers A and B as a person reads them (render's
    plain text: tool calls as the tool and its arguments, never the raw `<tool_call>` JSON)."""
    view = trial.view()
    tools = f" (tools offered: {', '.join(view.context.tools)})" if view.context.tools else ""
    parts = [f"The context the agent saw before its next action{tools}:", plain_context(view.context)]
    for side, answer_parts in (("A", view.a), ("B", view.b)):
        parts += ["", f"Answer {side}:", plain_parts(answer_parts, "  ") if answer_parts else "  (an empty answer)"]
    parts += ["", 'Which answer is the agent\'s, and which is better? JSON only: {"agent": …, "better": …}']
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(parts)}]


def parse(text: str) -> tuple[str, str] | None:
    """(pick, better) from an answer that is exactly one JSON object with "agent" in A / B / cant_tell and "better"
    in A / B / same (a ```json fence around it allowed); None for anything else."""
    found = _ANSWER.fullmatch(text or "")
    if found is None:
        return None
    try:
        said = json.loads(found.group(1))
    except ValueError:
        return None
    if not isinstance(said, dict) or set(said) != {"agent", "better"}:
        return None
    pick, better = said["agent"], said["better"]
    return (pick, better) if pick in PICKS and better in BETTER else None


@dataclass
class Judged:
    """What one run of the machine judge did: trials judged, those stored as "can't tell" because the answer was
    malformed twice, tokens used, and why it stopped before the end ("" when every trial was answered)."""

    test_id: int
    judged: int = 0
    malformed: int = 0
    tokens: int = 0
    stopped_because: str = ""
    trials: list[dict] = field(default_factory=list)  # {trial, position, pick, better, correct, malformed}

    def as_dict(self) -> dict:
        return asdict(self)


def ready(store: Store) -> None:
    """BlindError when the teacher cannot be asked now (before a test is drawn for it)."""
    if why := teacher.unready(store):
        raise BlindError("the teacher cannot judge a blind test now", why=why,
                         fix="or take the test yourself: nightschool judge blind")


def _ask(store: Store, messages: list[dict], trial: Trial, run: Judged) -> tuple[str | None, str]:
    """(the answer's text, "") or (None, why the teacher gave none)."""
    reply = teacher.ask(store, messages, about=f"blind:{trial.id}", max_tokens=MAX_TOKENS)
    run.tokens += reply.tokens
    if reply.status != teacher.ANSWERED:
        return None, reply.error
    return text_of((reply.message or {}).get("content")), ""


def judge(store: Store, test: BlindTest, progress: Callable[[dict, int, int], None] | None = None,
          cancel: threading.Event | None = None) -> Judged:
    """Answer the test's unanswered trials in order by the teacher; a trial whose answer is malformed is asked once
    more, then stored as "can't tell" (counted in `malformed`). Stops, leaving the rest for the next run, when the
    teacher cannot be asked or fails (the reason in `stopped_because`) or `cancel` is set."""
    if test.judge != JUDGE:
        raise BlindError(f"blind test #{test.id} is {test.judge}'s to answer, not the teacher's",
                         fix="start a test for the teacher: nightschool judge blind --judge teacher")
    run, total = Judged(test.id), len(test.trials)
    for trial in [t for t in test.trials if not t.answered]:
        if cancel is not None and cancel.is_set():
            run.stopped_because = "stopped"
            break
        started = time.monotonic()
        messages = prompt(trial)
        text, why = _ask(store, messages, trial, run)
        got = None if text is None else parse(text)
        if text is not None and got is None:
            text, why = _ask(store, [*messages, {"role": "assistant", "content": text},
                                     {"role": "user", "content": AGAIN}], trial, run)
            got = None if text is None else parse(text)
        if text is None:
            run.stopped_because = why
            break
        pick, better = got or ("cant_tell", None)
        done = answer(store, trial.id, pick, better, round(time.monotonic() - started, 2))
        run.judged += 1
        run.malformed += got is None
        said = {"trial": done.id, "position": done.position, "pick": pick, "better": better,
                "correct": done.correct, "student_was": done.student_was, "malformed": got is None}
        run.trials.append(said)
        if progress is not None:
            progress(said, done.position + 1, total)
    return run
