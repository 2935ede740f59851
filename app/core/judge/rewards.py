"""The behavioural reward for RL: five components of a generated completion, weighted, and TRL adapters.

One TRL reward function per component (so TRL logs each as rewards/<name>/mean) with the normalised weights as
GRPOConfig(reward_weights=trl_reward_weights(w)); the dataset carries `reward_context` = json.dumps(ctx.to_row()).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Mapping

from app.core.judge.reward_context import RewardContext, exploration_level
from app.core.judge.reward_parts import (
    constraint_adherence,
    exploration_fit,
    reasoning_depth,
    reasoning_fit,
    self_correction,
    tool_efficiency,
)
from app.core.toolcalls.actions import is_exploratory
from app.core.toolcalls.convention import as_text

__all__ = ["DEFAULT_WEIGHTS", "REWARD_VERSION", "Breakdown", "RewardContext", "answer_breakdowns", "completion_text",
           "constraint_adherence", "exploration_fit", "exploration_level", "is_exploratory", "normalise_weights",
           "parts_table", "reasoning_depth", "reasoning_fit", "reward_constraint", "reward_efficiency",
           "reward_exploration", "reward_reasoning", "reward_self_correction", "score", "self_correction",
           "teacher_breakdowns", "tool_efficiency", "trl_reward_funcs", "trl_reward_weights"]

DEFAULT_WEIGHTS = {"constraint": 0.25, "reasoning": 0.20, "efficiency": 0.20, "self_correction": 0.15,
                   "exploration": 0.20}
COMPONENTS: dict[str, Callable[[str, RewardContext], float]] = {
    "constraint": constraint_adherence, "reasoning": reasoning_fit, "efficiency": tool_efficiency,
    "self_correction": self_correction, "exploration": exploration_fit}
CONTEXT_COLUMN = "reward_context"
# bumped when a part or a weight changes: an evaluation scored by another reward is not reused (settings_sha256)
REWARD_VERSION = 2  # 2: "reasoning" is reasoning_fit (the teacher's amount), no longer reasoning_depth (more is better)


@dataclass(frozen=True)
class Breakdown:
    """Each component in [0, 1] and their weighted total (weights normalised to sum 1, so the total is in [0, 1])."""

    constraint: float
    reasoning: float
    efficiency: float
    self_correction: float
    exploration: float
    total: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def normalise_weights(weights: Mapping[str, float] | None = None) -> dict[str, float]:
    """DEFAULT_WEIGHTS with `weights` overriding some or all of them, scaled to sum 1. Unknown keys, negative or
    non-finite values, or all zero → ValueError."""
    weights = dict(weights or {})
    unknown = sorted(set(weights) - set(DEFAULT_WEIGHTS))
    if unknown:
        raise ValueError(f"unknown reward weight(s) {unknown}; the components are {list(DEFAULT_WEIGHTS)}")
    merged = {**DEFAULT_WEIGHTS, **weights}
    bad = {k: v for k, v in merged.items() if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0}
    if bad:
        raise ValueError(f"reward weights must be finite numbers >= 0, got {bad}")
    total = sum(merged.values())
    if total <= 0:
        raise ValueError("reward weights are all zero: at least one component must count")
    return {k: v / total for k, v in merged.items()}


def score(completion: str, ctx: RewardContext, weights: Mapping[str, float] | None = None) -> Breakdown:
    """Every component of one completion and the weighted total."""
    w = normalise_weights(weights)
    parts = {name: fn(completion, ctx) for name, fn in COMPONENTS.items()}
    return Breakdown(**parts, total=sum(w[k] * v for k, v in parts.items()))


# --- the reward on the teacher's own actions ---------------------------------------------------------------------

def _breakdowns(rows: Iterable[dict], field: str, weights: Mapping[str, float] | None) -> dict[str, Breakdown]:
    return {r["key"]: score(r.get(field) or "", RewardContext.from_row(r[CONTEXT_COLUMN]), weights)
            for r in rows if r.get(CONTEXT_COLUMN) is not None and "key" in r}


def teacher_breakdowns(rows: Iterable[dict], weights: Mapping[str, float] | None = None) -> dict[str, Breakdown]:
    """The teacher's recorded action of each held-out next action scored with the same reward and parts: key ->
    Breakdown, from an evaluation's generations rows (key, teacher, reward_context); rows written before the reward
    context was stored are left out."""
    return _breakdowns(rows, "teacher", weights)


def answer_breakdowns(rows: Iterable[dict], weights: Mapping[str, float] | None = None) -> dict[str, Breakdown]:
    """The model's answer of each next action (generations rows' `student`) scored the same way: key -> Breakdown."""
    return _breakdowns(rows, "student", weights)


def parts_table(teacher: Mapping[str, Breakdown], **models: Mapping[str, Breakdown]) -> dict | None:
    """The mean of each part and of the total for the teacher and each model (e.g. base=…, candidate=…) on the next
    actions all of them have: {"n", "weights", "parts": {part: {"teacher": mean, <model>: mean…}}, "teacher_below":
    {model: [the parts that rank the teacher below that model: such a part rewards something else than doing what
    the teacher did]}}; None when they share no next action."""
    keys = set(teacher).intersection(*models.values()) if models else set(teacher)
    if not keys:
        return None
    columns = {"teacher": teacher, **models}
    rows = {part: {name: round(sum(getattr(b[k], part) for k in keys) / len(keys), 4) for name, b in columns.items()}
            for part in (*DEFAULT_WEIGHTS, "total")}
    return {"n": len(keys), "weights": {k: round(v, 4) for k, v in normalise_weights().items()}, "parts": rows,
            "teacher_below": {name: [p for p, means in rows.items() if means["teacher"] < means[name]]
                              for name in models}}


# --- TRL ------------------------------------------------------------------------------------------------------------

def completion_text(completion: str | list[dict]) -> str:
    """A TRL completion as text: a string as is; conversational ([{role, content, tool_calls?}, …]) its assistant
    messages with structured tool calls written in the Hermes convention (tool results in between are left out)."""
    if isinstance(completion, str):
        return completion
    return "\n".join(as_text({**m, "role": "assistant"})["content"] for m in completion
                     if isinstance(m, dict) and m.get("role", "assistant") == "assistant")


def _rewards(component: str, completions: list, kwargs: dict[str, Any]) -> list[float]:
    column = kwargs.get(CONTEXT_COLUMN)
    if column is None:
        raise ValueError(f"the RL dataset needs a '{CONTEXT_COLUMN}' column (json.dumps(RewardContext.to_row()))")
    if len(column) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(column)} reward contexts")
    fn = COMPONENTS[component]
    return [fn(completion_text(c), RewardContext.from_row(row)) for c, row in zip(completions, column)]


def reward_constraint(prompts: list, completions: list, **kwargs: Any) -> list[float]:
    return _rewards("constraint", completions, kwargs)


def reward_reasoning(prompts: list, completions: list, **kwargs: Any) -> list[float]:
    return _rewards("reasoning", completions, kwargs)


def reward_efficiency(prompts: list, completions: list, **kwargs: Any) -> list[float]:
    return _rewards("efficiency", completions, kwargs)


def reward_self_correction(prompts: list, completions: list, **kwargs: Any) -> list[float]:
    return _rewards("self_correction", completions, kwargs)


def reward_exploration(prompts: list, completions: list, **kwargs: Any) -> list[float]:
    return _rewards("exploration", completions, kwargs)


TRL_FUNCS = {"constraint": reward_constraint, "reasoning": reward_reasoning, "efficiency": reward_efficiency,
             "self_correction": reward_self_correction, "exploration": reward_exploration}


def trl_reward_funcs(weights: Mapping[str, float] | None = None) -> list[Callable[..., list[float]]]:
    """GRPOTrainer(reward_funcs=…): one module-level (picklable) function per component whose weight is above zero,
    in DEFAULT_WEIGHTS order; pair with trl_reward_weights(weights)."""
    return [TRL_FUNCS[k] for k, v in normalise_weights(weights).items() if v > 0]


def trl_reward_weights(weights: Mapping[str, float] | None = None) -> list[float]:
    """GRPOConfig(reward_weights=…): the normalised weights matching trl_reward_funcs(weights), in its order."""
    return [v for v in normalise_weights(weights).values() if v > 0]
