"""`nightschool judge blind` in a real terminal: the command runs in a subprocess on a pseudo-terminal (os.openpty), is
answered key by key (no Enter needed: 1 / 2 / 0, then a / b / s or Enter), stopped with q after two trials, run again
to go on at the third, finished; the stored trials hold the picks, and `--results` prints the share."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from app.cli.main import main as cli
from app.core.judge.blind import trials as T
from tests.conftest import BLIND_TOKENS

DEADLINE_S = 60.0


class Terminal:
    """A command on a pseudo-terminal: what it wrote so far, waited on by pattern; keys sent one by one."""

    def __init__(self, args: list[str], env: dict) -> None:
        master, slave = os.openpty()
        self.proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
        os.close(slave)
        self.master, self.seen, self.pos = master, "", 0

    def expect(self, text: str) -> str:
        """Wait until `text` appears after what was expected before; returns the output up to it."""
        deadline = time.monotonic() + DEADLINE_S
        while (found := self.seen.find(text, self.pos)) < 0:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} never came; the terminal shows:\n{self.seen[self.pos:]}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the command ended and its terminal closed
                    chunk = b""
                assert chunk or self.proc.poll() is None, f"ended before {text!r}:\n{self.seen[self.pos:]}"
                self.seen += chunk.decode(errors="replace")
        before, self.pos = self.seen[self.pos:found], found + len(text)
        return before

    def press(self, key: str) -> None:
        os.write(self.master, key.encode())

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=DEADLINE_S)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            os.close(self.master)


def blind(env: dict) -> Terminal:
    return Terminal([sys.executable, "-m", "app.cli.main", "judge", "blind", "--n", "4", "--max-new-tokens",
                     str(BLIND_TOKENS)], env)


def answer(term: Terminal, trial: int, pick: str, better: str) -> str:
    """One trial: its screen (returned), the pick's key, then the better answer's."""
    screen = term.expect(f"Trial {trial} of 4")
    screen = term.expect("Which is the agent?")
    term.press(pick)
    term.expect("Which answer is better?")
    term.press(better)
    return screen


@pytest.mark.slow  # the blind school fixture: a held-out set built and evaluated through llama.cpp once per session
def test_the_terminal_blind_test_stops_and_goes_on(blind_store, ns_home, capsys):
    env = {**os.environ, "NIGHTSCHOOL_HOME": str(ns_home), "PYTHONUNBUFFERED": "1", "COLUMNS": "120"}
    term = blind(env)
    term.expect("Blind test #1 of base: 0 of 4 answered")
    screen = answer(term, 1, "1", "a")
    assert "Context: what the agent saw" in screen and "Answer A" in screen and "Answer B" in screen
    assert "<tool_call>" not in screen.split("Answer A")[0]  # the context's calls read as tool + arguments
    answer(term, 2, "0", "\r")
    term.expect("Trial 3 of 4")
    term.expect("Which is the agent?")
    term.press("x")
    term.expect("not one of the keys: 0, 1, 2, q")
    term.press("q")
    term.expect("Stopped: 2 of 4 answered; `nightschool judge blind` goes on at trial 3.")
    assert term.close() == 0

    stored = T.load(blind_store, 1)
    assert [(t.pick, t.better) for t in stored.trials] == [("A", "A"), ("cant_tell", None), (None, None),
                                                           (None, None)]
    assert all(t.seconds is not None and t.seconds >= 0 for t in stored.trials[:2])

    term = blind(env)
    term.expect("Blind test #1 of base: 2 of 4 answered")
    assert "Trial 1 of 4" not in term.expect("Trial 3 of 4")  # goes on where it stopped
    term.expect("Which is the agent?")
    term.press("2")
    term.expect("Which answer is better?")
    term.press("s")
    answer(term, 4, "1", "b")
    term.expect("Blind test #1 finished. base: ")
    term.expect("indistinguishable")
    assert term.close() == 0

    done = T.load(blind_store, 1)
    assert done.done and [(t.pick, t.better) for t in done.trials] == [("A", "A"), ("cant_tell", None), ("B", "same"),
                                                                       ("A", "B")]
    expected = sum(t.pick != t.agent_side for t in done.trials)
    capsys.readouterr()
    assert cli(["judge", "blind", "--results", "--json"]) == 0
    [result] = json.loads(capsys.readouterr().out)
    assert (result["model"], result["trials"], result["indistinguishable"]) == ("base", 4, expected)
    assert cli(["judge", "blind", "--results"]) == 0
    assert f"base: {expected * 25} % indistinguishable" in capsys.readouterr().out
