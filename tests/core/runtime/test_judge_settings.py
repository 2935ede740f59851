"""How a judgement runs on this machine: the policy's evaluator (auto: llama.cpp, the served form, on a CPU;
transformers with a GPU), how many held-out examples the loss reads (auto: fewer on a CPU, where every token of
every example is most of an evaluation's time) and how many next actions are judged (auto: 96 on a CPU, 200 with a
GPU); a policy value wins over auto, and a manual promote or compare (CLI, Judge tab) judges exactly as a cycle does,
its named options over it."""
from __future__ import annotations

import pytest

from app.cli.main import build_parser
from app.cli.judge import judging_settings
from app.core.judge.promote import CPU_CONTEXTS, CPU_LOSS_EXAMPLES, settings_here
from app.core.runtime.school import policy as P
from app.core.runtime.school.policy import Policy, judge_settings


@pytest.mark.parametrize(("gpus", "evaluator", "examples", "contexts"),
                         [("0", "llama.cpp", CPU_LOSS_EXAMPLES, CPU_CONTEXTS), ("1", "transformers", 200, 200)])
def test_auto_follows_the_machine(monkeypatch, gpus, evaluator, examples, contexts):
    monkeypatch.setenv("NIGHTSCHOOL_GPUS", gpus)
    got = judge_settings(Policy())
    assert (got.evaluator, got.max_examples, got.max_contexts) == (evaluator, examples, contexts)
    assert got == settings_here()  # what a judgement without a policy uses (a deployment's gate)
    assert CPU_CONTEXTS >= 96


def test_the_policy_wins_over_auto(monkeypatch):
    monkeypatch.setenv("NIGHTSCHOOL_GPUS", "0")
    got = judge_settings(Policy(judge_with="transformers", judge_examples=30, judge_contexts=40))
    assert (got.evaluator, got.max_examples, got.max_contexts) == ("transformers", 30, 40)


@pytest.mark.parametrize("gpus", ["0", "1"])
def test_a_cli_promote_judges_as_a_cycle_does(monkeypatch, store, gpus):
    """The settings objects compared (no judgement runs): the CLI's promote and compare read the store's policy as the
    cycle's judging stage does; options a person names win (the Judge tab's: tests/ui/test_judge_panel.py)."""
    monkeypatch.setenv("NIGHTSCHOOL_GPUS", gpus)
    P.set_value(store, "judge_contexts", "120")
    cycle = judge_settings(P.load(store))  # what stages.judging passes to judge/promote.judge
    parser = build_parser()
    for argv in (["promote", "#3"], ["compare", "base", "#3"]):
        assert judging_settings(store, parser.parse_args(argv)) == cycle
    assert cycle.max_contexts == 120 and cycle.evaluator == ("llama.cpp" if gpus == "0" else "transformers")
    named = judging_settings(store, parser.parse_args(["promote", "#3", "--max-contexts", "24",
                                                       "--max-new-tokens", "48"]))
    assert named == cycle.model_copy(update={"max_contexts": 24, "max_new_tokens": 48})
