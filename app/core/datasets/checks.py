"""STANDARD content checks on a built example: the spec (deny by default), empty turns, answer
leakage (a target inside the prompt), and a second secret scan. DEEP checks (template round-trip) are the engine's."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from app.core.scrub.scrubber import Scrubber
from app.core.datafiles.formats import SPECS, record_problem

LEAK_MIN_CHARS = 40  # shorter answers ("Done.", "Yes") appear in prompts by chance
_THINK = re.compile(r"<think>.*?</think>\s*", re.S)
_SPACE = re.compile(r"\s+")


@dataclass
class Problem:
    """Why an example was excluded: the check, and a readable detail (never a secret's value)."""

    check: str  # spec | empty | leakage | secret | over_length | round_trip | overlap
    detail: str

    def as_dict(self) -> dict:
        return {"check": self.check, "detail": self.detail}


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()


def spec_problem(record: dict, spec_id: str = "chat_sft_v1") -> Problem | None:
    spec = SPECS[spec_id]
    problem = record_problem(spec, record)
    return Problem("spec" if "empty" not in (problem or "") else "empty", problem) if problem else None


def leakage(messages: list[dict]) -> Problem | None:
    """An assistant answer (40+ characters, thinking aside) found verbatim in a user or system message before it."""
    prompt = ""
    for i, m in enumerate(messages):
        if m["role"] in ("user", "system"):
            prompt += "\n" + _norm(m.get("content") or "")
        elif m["role"] == "assistant":
            answer = _norm(_THINK.sub("", m.get("content") or ""))
            if len(answer) >= LEAK_MIN_CHARS and answer in prompt:
                return Problem("leakage", f"message {i} (assistant) \u201c{answer[:60]}…\u201d already appears in the "
                                          "prompt: the target is given away")
    return None


def secrets(messages: list[dict], scrubber: Scrubber) -> Problem | None:
    """Run the secret rules again over every string of the example; report types and places, not values."""
    strings, where = [], []
    for i, m in enumerate(messages):
        strings.append(m.get("content") or "")
        where.append(i)
        for call in m.get("tool_calls") or []:
            strings.append(json.dumps(call.get("function", {}).get("arguments", {}), ensure_ascii=False))
            where.append(i)
    found = []
    for i, text in zip(where, strings):
        before = scrubber.report.total
        scrubber.text(text)
        if scrubber.report.total > before:
            found.append(i)
    if not found:
        return None
    kinds = ", ".join(f"{n} × {k}" for k, n in sorted(scrubber.report.counts.items()))
    scrubber.report.counts.clear()
    return Problem("secret", f"possible secret ({kinds}) in message(s) {sorted(set(found))}")


def standard(record: dict, scrubber: Scrubber) -> list[Problem]:
    """Every STANDARD problem of one chat_sft_v1 record."""
    out = [p for p in (spec_problem(record),) if p]
    if out:
        return out
    return [p for p in (leakage(record["messages"]), secrets(record["messages"], scrubber)) if p]
