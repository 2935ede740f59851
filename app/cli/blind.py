"""`nightschool judge blind [--model M] [--n 20] [--judge person|teacher] [--json]` and `nightschool judge blind
--results [--json]`: the blind test in a plain terminal (one key a trial: 1 = A is the agent, 2 = B, 0 = can't tell,
then a / b / s for the better answer or Enter, q to stop and go on later), or answered by the teacher over its API,
and each tested model's indistinguishable share per judge."""
from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from app.cli.common import WorkerProgress, open_store, print_json, refusals

PICK_KEYS = {"1": "A", "2": "B", "0": "cant_tell"}
BETTER_KEYS = {"a": "A", "b": "B", "s": "same", "": None}
RULE = "─" * 24


class Keys:
    """One answer at a time from the terminal: a single key where stdin is a terminal (no Enter needed; the terminal
    in cbreak mode while the test runs, so a key typed ahead is kept), else a line (its first character; an empty
    line is Enter). None at the end of input. A context manager: the terminal's mode is restored on leaving."""

    def __init__(self, stream: TextIO = sys.stdin, out: TextIO = sys.stdout) -> None:
        self.stream, self.out, self.before = stream, out, None
        try:
            import termios  # noqa: F401 - POSIX only: elsewhere a line at a time
            self.tty = stream.isatty()
        except ImportError:
            self.tty = False

    def __enter__(self) -> Keys:
        if self.tty:
            import termios
            import tty

            self.before = termios.tcgetattr(self.stream.fileno())
            tty.setcbreak(self.stream.fileno(), termios.TCSANOW)  # not TCSAFLUSH: keys typed ahead stay
        return self

    def __exit__(self, *_exc) -> None:
        if self.before is not None:
            import termios

            termios.tcsetattr(self.stream.fileno(), termios.TCSADRAIN, self.before)
            self.before = None

    def _read(self) -> str | None:
        if not self.tty:
            line = self.stream.readline()
            return None if line == "" else line.strip()[:1]
        ch = os.read(self.stream.fileno(), 1).decode(errors="ignore")
        return None if ch in ("", "\x04") else ("" if ch in ("\r", "\n") else ch)

    def ask(self, prompt: str, allowed: set[str]) -> str | None:
        """The key pressed among `allowed` (lower case; "" for Enter when allowed), asked again otherwise."""
        while True:
            print(prompt, end="", flush=True, file=self.out)
            key = self._read()
            if key is None:
                print(file=self.out)
                return None
            key = key.lower()
            print(key if self.tty else "", file=self.out, flush=True)
            if key in allowed:
                return key
            print("  not one of the keys: " + ", ".join(k or "Enter" for k in sorted(allowed)), file=self.out)


def show(trial, index: int, total: int, out: TextIO) -> None:
    """A trial as a person reads it: the context's last turns, then answer A and answer B (judge/blind/render)."""
    from app.core.judge.blind.render import plain_context, plain_parts

    view = trial.view()
    tools = f"; tools offered: {', '.join(view.context.tools)}" if view.context.tools else ""
    print(f"\n━━ Trial {index} of {total} ━━", file=out)
    print(f"{RULE} Context: what the agent saw before its next action{tools}", file=out)
    print(plain_context(view.context), file=out)
    for side, parts in (("A", view.a), ("B", view.b)):
        print(f"{RULE} Answer {side}", file=out)
        print(plain_parts(parts, "  ") if parts else "  (an empty answer)", file=out)
    print(RULE, file=out)


def take(store, test, keys: Keys, out: TextIO, again: str = "nightschool judge blind") -> bool:
    """Ask each unanswered trial in order; True when the test is finished, False when the person stopped (`again`:
    the command that goes on)."""
    from app.core.judge.blind.trials import answer, load

    total = len(test.trials)
    print(f"Blind test #{test.id} of {test.label}: {test.answered} of {total} answered. Which answer is the agent's, "
          "which the student's? 1 = A, 2 = B, 0 = can't tell; then the better answer (a / b / s = same, Enter: "
          "skip); q stops, and the same command goes on later.", file=out)
    while (trial := test.next_trial()) is not None:
        show(trial, trial.position + 1, total, out)
        shown = time.monotonic()
        try:
            pick = keys.ask("Which is the agent?  1 = A · 2 = B · 0 = can't tell · q = stop for now: ",
                            set(PICK_KEYS) | {"q"})
            seconds = round(time.monotonic() - shown, 1)
            if pick in (None, "q"):
                break
            better = keys.ask("Which answer is better?  a = A · b = B · s = same · Enter = skip: ",
                              set(BETTER_KEYS) | {"q"})
        except KeyboardInterrupt:
            break
        answer(store, trial.id, PICK_KEYS[pick], BETTER_KEYS.get(better), seconds)
        if better in (None, "q"):
            break
        test = load(store, test.id)
    test = load(store, test.id)
    if not test.done:
        print(f"\nStopped: {test.answered} of {total} answered; `{again}` goes on at trial "
              f"{test.next_trial().position + 1}.", file=out)
    return test.done


def by_teacher(store, test, out: TextIO) -> tuple[bool, dict]:
    """The teacher answers the test's unanswered trials (judge/blind/machine), a line each; (finished, what it
    did)."""
    from app.core.judge.blind.machine import judge

    def said(trial: dict, index: int, total: int) -> None:
        pick = {"A": "A is the agent's", "B": "B is the agent's", "cant_tell": "can't tell"}[trial["pick"]]
        right = "" if trial["pick"] == "cant_tell" else (" (right)" if trial["correct"] else " (wrong)")
        better = f"; the student's answer {trial['student_was']}" if trial["student_was"] else ""
        note = " — its answer was malformed twice: stored as can't tell" if trial["malformed"] else ""
        print(f"Trial {index} of {total}: {pick}{right}{better}{note}", file=out, flush=True)

    print(f"Blind test #{test.id} of {test.label}, judged by the teacher: {test.answered} of {len(test.trials)} "
          "answered before.", file=out)
    run = judge(store, test, said)
    if run.malformed:
        print(f"{run.malformed} answer(s) malformed twice were stored as can't tell.", file=out)
    if run.stopped_because:
        print(f"\nStopped: {run.stopped_because}; `nightschool judge blind --judge teacher` goes on later.", file=out)
    return run.stopped_because == "", run.as_dict()


def cmd_blind(args) -> int:
    def go() -> int:
        from app.core.judge.blind.figure import result_of, words
        from app.core.runtime.school.facade import School

        school = School(open_store())
        if args.results:
            found = school.blind_results(args.judge)
            if args.json:
                return print_json(found)
            for result in found:
                print(words(result))
            if not found:
                print("no blind test yet: take one with `nightschool judge blind`")
            return 0
        who = args.judge or "person"
        view = WorkerProgress()
        test = school.blind_test(args.model, args.n, judge=who, sink=view, max_new_tokens=args.max_new_tokens)
        view.close()
        out = sys.stderr if args.json else sys.stdout  # with --json, stdout is the result alone
        judged = None
        if who == "teacher":
            finished, judged = by_teacher(school.store, test, out)
        else:
            with Keys(sys.stdin, out) as keys:
                again = "nightschool judge blind" + (f" --model '{args.model}'" if args.model else "")
                finished = take(school.store, test, keys, out, again)
        result = result_of(school.store, test.base_model, test.checkpoint_id, test.judge)
        failed = int(judged is not None and not finished)  # the teacher failed: said, and the exit status says so
        if args.json:
            print_json({"test": test.id, "judge": who, "finished": finished,
                        "result": result.as_dict() if result else None, **({"teacher": judged} if judged else {})})
            return failed
        if finished and result is not None:
            print(f"\nBlind test #{test.id} finished. {words(result.as_dict())}")
        return failed
    return refusals(go)


def register(sub) -> None:
    """Add `judge blind` to the main parser's subcommands."""
    jp = sub.add_parser("judge", help="the blind test: can you tell the student's next action from the agent's?")
    js = jp.add_subparsers(title="judge commands", required=True)
    b = js.add_parser("blind", help="take the blind test in the terminal (stop with q, go on later), or --results")
    b.add_argument("--model", help="'#ID' (nightschool checkpoints), a job id, 'base' (default: the deployed student "
                                   "of the policy's base model)")
    b.add_argument("--n", type=int, default=20, help="trials in a new test (default 20)")
    b.add_argument("--max-new-tokens", type=int, help="the student's answer length when its answers must be "
                   "generated (default: as a cycle judges, so a cycle's evaluation is reused)")
    b.add_argument("--judge", choices=("person", "teacher"), help="who answers: you (default) or the teacher over "
                   "its API (nightschool experience teacher …), stored apart; with --results, only that judge's")
    b.add_argument("--results", action="store_true", help="each tested model's indistinguishable share and interval")
    b.add_argument("--json", action="store_true", help="print the result as JSON on stdout (the test itself on "
                                                       "stderr)")
    b.set_defaults(func=cmd_blind)
