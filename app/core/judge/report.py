"""An evaluation's report: the metrics of one model (the base, or base + a checkpoint's adapter) on one held-out set,
how its next actions fared, and a fixed set of sample generations for side-by-side viewing. Also the composite score
that ranks checkpoints, and the per-example evidence files every evaluator (transformers or llama.cpp) writes beside
report.json for the gate's paired statistics:

- `losses.jsonl`, one row per loss example with assistant tokens: {"key": example_key(messages), "session_id": the
  held-out session it comes from ("" when the record names none; absent in files written before), "nll": summed NLL
  of its assistant tokens, "tokens": their number}; the rows sum to the report's loss (sum nll / sum tokens).
- `generations.jsonl`, one row per held-out next action: {"key": the context's key, "session_id", "turn", "prompt",
  "teacher", "student", "finished": whether the answer ended (absent in files written before), "outcome", "why",
  "reward", "attempted": tool-call blocks the answer wrote, "valid": those that parse and match their tool,
  "reward_context": what the reward judged it against (RewardContext.to_row(); absent in files written before: the
  teacher's action is scored against it too, rewards.teacher_breakdowns)}; agreement = outcome "agree", validity =
  sum valid / sum attempted."""
from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from app.core.base.files import atomic_write
from app.core.judge.decoding import GRAMMAR, REPEAT_PENALTY

REPORT = "report.json"
LOSSES = "losses.jsonl"
GENERATIONS = "generations.jsonl"
FORMAT = 2  # 2: losses.jsonl and per-context attempted/valid exist (the gate pairs them); older reports are re-run
# metric -> (words, better direction); the gate and the comparison table read this
METRICS: dict[str, tuple[str, str]] = {
    "loss": ("held-out loss", "lower"),
    "perplexity": ("perplexity", "lower"),
    "agreement": ("next-action agreement", "higher"),
    "tool_agreement": ("same tool as the teacher", "higher"),
    "validity": ("tool-call validity", "higher"),
    "reward": ("behavioural reward", "higher"),
}
COMPOSITE = {"loss": 0.3, "agreement": 0.3, "validity": 0.2, "reward": 0.2}  # loss enters as 1 / (1 + loss)


class Sample(BaseModel):
    """One held-out prompt: what the teacher did next and what this model generated."""

    key: str
    session_id: str = ""
    turn: int = 0
    prompt: str  # the end of the context (the last user / tool messages), as text
    teacher: str  # the teacher's action in the Hermes text convention
    student: str
    outcome: str


class EvalSettings(BaseModel):
    """What decides an evaluation's numbers besides the model and the data (cached evals must share them). These
    defaults are a bare evaluation's (`nightschool eval`); a judgement's (a cycle, promote, compare, the Judge tab)
    are this machine's: judge/promote.settings_here."""

    max_contexts: int = Field(48, ge=1)
    max_new_tokens: int = Field(160, ge=8, le=4096)
    max_examples: int = Field(200, ge=1)  # for the teacher-forced loss
    samples: int = Field(8, ge=0)
    seed: int = 0
    # how the next actions are drawn: "sessions" round-robin across held-out sessions, near-identical contexts once
    # (evalset.contexts); "hash" by a stable hash alone, as reports written before it say (their cache stays theirs)
    draw: Literal["sessions", "hash"] = "sessions"
    # which evaluator runs it: transformers (the reference; GPUs) or llama.cpp on an f16 GGUF of the model (CPUs: the
    # served form, minutes instead of tens of minutes); same cases, same judge, separate caches
    evaluator: Literal["transformers", "llama.cpp"] = "transformers"
    # decoding (app/core/judge/decoding.py, as served): repetition penalty over the last generated tokens (1.0: off)
    repeat_penalty: float = Field(REPEAT_PENALTY, ge=1.0, le=2.0)
    # tool calls under the grammar of the context's tools (decoding.tool_grammar), as served; llama.cpp only: the
    # transformers evaluator has no grammar sampler and decodes without it
    grammar: bool = GRAMMAR


class EvalReport(BaseModel):
    format: int = FORMAT  # reports written before the per-example files say 1
    label: str  # "base" or the checkpoint's label
    base_model: str
    adapter: str | None = None
    adapter_sha256: str | None = None
    eval_set: str  # the held-out set's name (a dataset's test split, or a file)
    eval_set_sha256: str
    examples: int = 0
    contexts: int = 0
    metrics: dict[str, float | None] = Field(default_factory=dict)
    outcomes: dict[str, int] = Field(default_factory=dict)
    tokens: int = 0  # assistant tokens the loss was measured on
    calls_attempted: int = 0
    calls_valid: int = 0
    samples: list[Sample] = Field(default_factory=list)
    settings: EvalSettings = Field(default_factory=EvalSettings)
    device: str = "cpu"
    elapsed_s: float = 0.0
    runtime: str = "hf"  # "hf": transformers on the checkpoint; "gguf": llama.cpp on the exported file
    quant: str | None = None  # the GGUF's quantization (runtime "gguf")
    gguf_sha256: str | None = None
    tokenization_matched: int | None = None  # loss examples llama.cpp tokenises exactly as the HF tokenizer does
    prompts_matched: int | None = None  # next-action prompts the GGUF's template renders exactly as training
    reused_contexts: int = 0  # next actions and loss examples taken from an earlier evaluation of the same model
    reused_examples: int = 0  # and settings on the set before it grew (EvalConfig.reuse), not measured again
    set_aside: int = 0  # held-out contexts no draw took: blind-test pairs were made of them (evalset.set_aside)

    @model_validator(mode="before")
    @classmethod
    def _old_draw(cls, data):
        """A report written before the draw was a setting drew its next actions by hash alone: say so, so that what
        is evaluated "the same way" (a GGUF against its checkpoint) draws the same next actions."""
        if isinstance(data, dict) and isinstance(data.get("settings"), dict) and "draw" not in data["settings"]:
            data = {**data, "settings": {**data["settings"], "draw": "hash"}}
        if isinstance(data, dict) and isinstance(data.get("settings"), dict) and "repeat_penalty" not in data["settings"]:
            data = {**data, "settings": {**data["settings"], "repeat_penalty": 1.0}}  # decoded without a penalty then
        if isinstance(data, dict) and isinstance(data.get("settings"), dict) and "grammar" not in data["settings"]:
            data = {**data, "settings": {**data["settings"], "grammar": False}}  # decoded without a grammar then
        return data

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        return atomic_write(folder / REPORT, self.model_dump_json(indent=1))

    @classmethod
    def read(cls, path: Path) -> EvalReport:
        path = Path(path)
        return cls.model_validate_json((path / REPORT if path.is_dir() else path).read_text(encoding="utf-8"))


def metrics_from(nll_sum: float, tokens: int, judged: Iterable, rewards: list[float]) -> tuple[dict, dict, int, int]:
    """(metrics, outcome counts, calls attempted, calls valid) from the summed token NLL, the judged next actions
    (nextaction.Judged) and the behavioural rewards. Validity = valid / attempted tool-call blocks; a model that never
    attempted one where the teacher called tools scores 0 (it cannot call tools), with no such case (or only calls the
    answer limit cut, which count for neither side) it is None."""
    judged = list(judged)
    loss = nll_sum / tokens if tokens else None
    outcomes = Counter(j.outcome for j in judged)
    attempted, valid = sum(j.attempted for j in judged), sum(j.valid for j in judged)
    tool_cases = [j for j in judged if j.teacher_tool]
    same_tool = sum(j.same_tool for j in tool_cases)
    metrics = {
        "loss": loss,
        "perplexity": math.exp(min(loss, 50.0)) if loss is not None else None,
        "agreement": outcomes["agree"] / len(judged) if judged else None,
        "tool_agreement": same_tool / len(tool_cases) if tool_cases else None,
        "validity": valid / attempted if attempted else (0.0 if tool_cases and not any(j.cut for j in judged)
                                                         else None),
        "reward": sum(rewards) / len(rewards) if rewards else None,
    }
    return metrics, dict(outcomes), attempted, valid


def composite(metrics: dict[str, float | None]) -> float:
    """A score in [0, 1] for ranking: 0.3 / (1 + loss) + 0.3 agreement + 0.2 validity + 0.2 reward (a missing
    metric counts 0)."""
    loss = metrics.get("loss")
    parts = {"loss": 1.0 / (1.0 + loss) if loss is not None else 0.0,
             **{k: metrics.get(k) or 0.0 for k in ("agreement", "validity", "reward")}}
    return round(sum(COMPOSITE[k] * v for k, v in parts.items()), 4)


def places(scores: list[float], digits: int = 3) -> list[int]:
    """The place of each score (best first, as given) where equal scores at `digits` share a place: 1, 1, 3."""
    shown = [round(s, digits) for s in scores]
    return [1 + sum(other > mine for other in shown) for mine in shown]


def example_key(messages: list[dict]) -> str:
    """A loss example's stable key: the same messages give the same key in every evaluation and evaluator."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:24]


def loss_rows(examples: list[list[dict]], per_example: list[tuple[float, int]],
              sessions: list[str] | None = None) -> list[dict]:
    """losses.jsonl's rows: (summed NLL, tokens) of each example with its session (`sessions`, one per example),
    keyed (a repeated example gets `key~2`, `key~3`…); examples without an assistant token are left out (they add
    nothing to the loss)."""
    seen: Counter = Counter()
    rows = []
    for i, (messages, (nll, tokens)) in enumerate(zip(examples, per_example)):
        key = example_key(messages)
        seen[key] += 1
        if tokens:
            rows.append({"key": key if seen[key] == 1 else f"{key}~{seen[key]}",
                         "session_id": sessions[i] if sessions else "", "nll": nll, "tokens": tokens})
    return rows


def write_rows(path: Path, rows: Iterable[dict]) -> Path:
    """A JSONL evidence file (losses.jsonl, generations.jsonl), written atomically."""
    return atomic_write(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def read_rows(path: Path) -> list[dict]:
    """The rows of an evidence file; [] when it does not exist."""
    path = Path(path)
    if not path.is_file():
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
