"""How a cycle judges on this machine: the policy's evaluator (auto: llama.cpp, the served form, on a CPU;
transformers with a GPU) and how many held-out examples the loss reads (auto: fewer on a CPU, where every token of
every example is most of an evaluation's time); a policy value wins over auto."""
from __future__ import annotations

import pytest

from app.core.runtime.school.policy import Policy
from app.core.runtime.school.stages import CPU_LOSS_EXAMPLES, judge_settings


@pytest.mark.parametrize(("gpus", "evaluator", "examples"), [("0", "llama.cpp", CPU_LOSS_EXAMPLES),
                                                              ("1", "transformers", 200)])
def test_auto_follows_the_machine(monkeypatch, gpus, evaluator, examples):
    monkeypatch.setenv("NIGHTSCHOOL_GPUS", gpus)
    policy = Policy()
    got = judge_settings(policy.judge_with, policy.judge_examples)
    assert (got.evaluator, got.max_examples) == (evaluator, examples)


def test_the_policy_wins_over_auto(monkeypatch):
    monkeypatch.setenv("NIGHTSCHOOL_GPUS", "0")
    got = judge_settings("transformers", 30)
    assert (got.evaluator, got.max_examples) == ("transformers", 30)
