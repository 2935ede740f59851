"""What the terminal says reads as sentences: a refused policy value in our words (none of the validation library's),
each part of a refusal capitalised, `school policy` says what each key means, and a reader that goes away early
(`nightschool school status | head -1`) gets no traceback."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def test_a_reader_that_went_away_gets_no_traceback(ns_home):
    """`nightschool school status | head -1`: the reader closes the pipe early; the command ends with exit 1 and
    nothing on stderr (the Python docs' recipe in main), not a BrokenPipeError traceback. The read end is closed
    before the command writes, so the pipe is broken whatever the timing."""
    read, write = os.pipe()
    os.close(read)
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    try:
        done = subprocess.run([sys.executable, "-m", "app.cli.main", "school", "status"], cwd=REPO,
                              env={**env, "NIGHTSCHOOL_HOME": str(ns_home)}, stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120, check=False)
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 1


@pytest.mark.parametrize("key, value, why", [
    ("window", "25:00-99:00", "An hour is 0-23"), ("window", "soon", "It is not two times of day"),
    ("min_sessions", "-1", ""), ("deploy", "sometimes", ""),
    ("hyper", '{"learning_rate": "fast"}', ". learning_rate must be a number."),
    ("hyper", '{"lr": 0.1}', "'lr' is not one of its names")])
def test_a_refused_policy_value_reads_as_sentences_in_our_words(ns_home, store, key, value, why):
    """What is wrong, then what the key accepts, once: none of pydantic's words ("Value error, …", "Input should be
    …", "1 validation error for …") and no rule said twice; a why or fix starts with a capital."""
    from app.core.runtime.school.policy import PolicyError, accepted, set_value

    with pytest.raises(PolicyError) as refused:
        set_value(store, key, value)
    said = str(refused.value)
    assert said.startswith(f"{key} cannot be ") and said.endswith(f"accepts {accepted(key)}.")
    for words in ("Value error", "Input should", "validation error", "type=", "pydantic"):
        assert words not in said, said
    assert said.count(accepted(key)) == 1
    if why:
        assert why in said
    else:  # a bound or a type: the fix says it, nothing else does
        assert said.lower() == f"{key} cannot be {value!r}. {key} accepts {accepted(key)}.".lower()


def test_each_part_of_a_refusal_is_a_sentence():
    """Why and fix start with a capital once joined ("… for default. The base model is …"); a name or a command that
    starts one keeps its case."""
    from app.core.judge.records import JudgeError

    said = str(JudgeError("nothing to roll back for default", why="the base model is what is deployed",
                          fix="nightschool judge promote #3 deploys a checkpoint"))
    assert said == ("nothing to roll back for default. The base model is what is deployed. nightschool judge promote "
                    "#3 deploys a checkpoint.")
    assert str(JudgeError("x", why="max_rows is 0")) == "x. max_rows is 0."


def test_the_policy_listing_says_what_each_key_means(ns_home, capsys):
    from app.core.runtime.school.policy import Policy, meaning

    assert main(["school", "policy"]) == 0
    out = capsys.readouterr().out
    for key in Policy.model_fields:
        assert meaning(key), f"{key} has no description"
        assert f"\n{'':16} {meaning(key)}\n" in out


def test_counts_are_written_one_way_in_the_terminal_and_the_window():
    """'200 000' beside '200,000' no more: the CLI and the window write counts with the one helper, commas."""
    from app.cli import common
    from app.core.base.words import grouped
    from app.ui.experience.words import budget_line

    assert common.grouped is grouped and grouped(200_000) == "200,000" and grouped(None) == "-"
    assert budget_line({"tokens_today": 12_400, "tokens_per_day": 200_000}) == "12,400 of 200,000 tokens today"
