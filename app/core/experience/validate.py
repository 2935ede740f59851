"""Whether a correction (the teacher's or a client's better answer to a flagged request) is good enough to train on."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from app.core.experience.flags import request_tools
from app.core.toolcalls.convention import as_text, strip_calls
from app.core.toolcalls.schemas import validity

CHECK_WEIGHT = 0.2  # five checks, equal weights
TEMPLATE_TOKENS = re.compile(r"<\|(?:im_start|im_end|eot_id|start_header_id|end_header_id|endoftext|end|assistant|"
                             r"user|system)\|>|<end_of_turn>|<start_of_turn>|</s>")
SEGMENTS = re.compile(r"(?<=[.!?])\s+|\n+")
MIN_SEGMENTS = 3  # repetition is judged only on answers with at least this many sentences or lines


@dataclass
class Check:
    """The verdict on one correction: ok, the score (0..1) and why points were lost."""

    ok: bool
    score: float
    reasons: list[str] = field(default_factory=list)


def check(request: dict, answer: dict, finish_reason: str = "stop", min_score: float = 0.7) -> Check:
    """Validate an assistant message (OpenAI `tool_calls` or Hermes `<tool_call>` text) against the request it answers.

    The score (0..1) is the weighted share of five passed checks, each worth a fifth:

    - ends its turn (hard): the answer did not stop at the token limit (finish_reason is not "length");
    - non-empty (hard): it has text or a tool call;
    - valid tool calls (hard): every tool call parses and matches the request's tool schemas (the judge's validity
      check); the check earns the share of valid calls (all of it when the answer calls no tool);
    - not repetitive: the share of distinct sentences/lines (an answer stuck in a loop earns ~0);
    - clean: no chat-template control tokens (`<|im_start|>`, `<|eot_id|>`, …) leaked into the text.

    ok when every hard check passes and the score is at least `min_score` (0.7 by default: an answer that passes the
    hard checks has 0.6 and must earn at least half of the two quality checks). Each failed or partly failed check
    gives its reason in words."""
    if not isinstance(answer, dict):
        return Check(False, 0.0, [f"the answer is not an assistant message (got {type(answer).__name__})"])
    try:
        text = as_text({**answer, "role": "assistant"})["content"]
    except (AttributeError, TypeError):
        return Check(False, 0.0, ["the answer's tool calls are not in the OpenAI shape (a list of function calls)"])
    parts = [_ends_turn(finish_reason), _non_empty(text), _calls(request, text), _not_repetitive(text), _clean(text)]
    hard = all(earned == 1.0 for earned, _ in parts[:3])
    score = round(sum(CHECK_WEIGHT * earned for earned, _ in parts), 4)
    reasons = [why for _, why in parts if why]
    if hard and score < min_score:
        reasons.append(f"the score {score:.2f} is below the threshold {min_score:.2f}")
    return Check(hard and score >= min_score, score, reasons)


def _ends_turn(finish_reason: str) -> tuple[float, str]:
    if finish_reason == "length":
        return 0.0, "it ran to the token limit without ending its turn"
    return 1.0, ""


def _non_empty(text: str) -> tuple[float, str]:
    return (1.0, "") if text.strip() else (0.0, "the answer is empty (no text and no tool call)")


def _calls(request: dict, text: str) -> tuple[float, str]:
    schemas = request_tools(request if isinstance(request, dict) else {})
    attempted, valid, why = validity(text, set(schemas), schemas)
    if attempted == valid:
        return 1.0, ""
    return valid / attempted, f"{attempted - valid} of {attempted} tool calls invalid: {'; '.join(why)}"


def _not_repetitive(text: str) -> tuple[float, str]:
    segments = [s.strip().lower() for s in SEGMENTS.split(strip_calls(text)) if len(s.split()) >= 3]
    if len(segments) < MIN_SEGMENTS:
        return 1.0, ""
    distinct = len(set(segments)) / len(segments)
    if distinct == 1.0:
        return 1.0, ""
    return distinct, f"it repeats itself ({len(segments) - len(set(segments))} of {len(segments)} sentences again)"


def _clean(text: str) -> tuple[float, str]:
    found = TEMPLATE_TOKENS.search(text)
    return (1.0, "") if found is None else (0.0, f"chat-template tokens leaked into the text ({found.group(0)})")


def summary(result: Check) -> str:
    """The verdict in one line, for the stored correction's reason."""
    if result.ok:
        return f"passed validation (score {result.score:.2f})" + (f"; {'; '.join(result.reasons)}"
                                                                   if result.reasons else "")
    return "; ".join(result.reasons) or f"score {result.score:.2f}"


def as_message(answer: Any) -> dict:
    """The assistant message a correction stores: role, content and tool calls only."""
    return {"role": "assistant", **{k: answer[k] for k in ("content", "tool_calls") if k in answer}}
