"""What a dataset build makes and keeps: the renderer it is given (engine side), each example, and the build's
findings (counts, exclusions, examples, the corrections it took and their pairs)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from app.core.datasets import checks, manifest
from app.core.datasets.convert import Conversation


class Renderer(Protocol):
    label: str
    template_sha256: str
    convention: str

    def count(self, messages: list[dict]) -> int: ...
    def render(self, messages: list[dict]) -> dict: ...  # text, input_ids, assistant_masks, segments
    def deep(self, messages: list[dict], rendered: dict) -> list[str]: ...  # template round-trip problems


@dataclass
class Example:
    id: str
    session_id: str
    split: str
    window: int
    messages: list[dict]
    rendered: dict
    source: str = "new"  # new | replay | heldout (every test example: the held-out set) | correction
    heldout_by: str = ""  # test examples: the dataset that held their session out
    provenance: dict = field(default_factory=dict)  # a correction's: correction_id, experience_id, teacher_model …

    def record(self) -> dict:
        masks = self.rendered["assistant_masks"]
        rec = {"id": self.id, "session_id": self.session_id, "window": self.window, "source": self.source,
               "messages": self.messages, "input_ids": self.rendered["input_ids"], "assistant_masks": masks,
               "tokens": len(masks), "trained": sum(masks), **self.provenance}
        return {**rec, "heldout_by": self.heldout_by} if self.split == "test" else rec


@dataclass
class Build:
    """What a build found, kept, excluded and why (becomes report.json and the manifest's counts)."""

    filters: Counter = field(default_factory=Counter)
    counts: Counter = field(default_factory=Counter)
    excluded: list[dict] = field(default_factory=list)
    examples: list[Example] = field(default_factory=list)
    conversations: dict[str, Conversation] = field(default_factory=dict)
    splits: dict[str, str] = field(default_factory=dict)  # session id -> split
    trimmed: set[str] = field(default_factory=set)  # interrupted sessions cut to their completed turns
    corrections: list[manifest.CorrectionUse] = field(default_factory=list)  # accepted corrections this build trains on
    pairs: list[dict] = field(default_factory=list)  # their preference pairs (pairs.jsonl)
    cuts: list[tuple[str, int]] = field(default_factory=list)  # (role, characters cut) per message shortened to fit
    unread: int = 0  # sessions an incremental build left unread: learned from, and not stored again since

    def exclude(self, session_id: str, window: int, problems: list[checks.Problem]) -> None:
        self.counts["excluded"] += 1
        for p in problems:
            self.counts[f"excluded: {p.check}"] += 1
        self.excluded.append({"session_id": session_id, "window": window,
                              "problems": [p.as_dict() for p in problems]})


def slim(rendered: dict) -> dict:
    """Once checked, keep only what is written (memory: 10 000 sessions hold every example until the write)."""
    for key in ("text", "offsets", "problems"):
        rendered.pop(key, None)
    return rendered
