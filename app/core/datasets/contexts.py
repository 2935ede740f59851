"""Teacher contexts: every assistant message of an SFT dataset's train split with the messages before it, once each
(`teacher_contexts`), read from the train examples only (`train_records`). Pair mining asks the student at each; the
next-action evaluation set and the RL recipe's prompts are cut the same way."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

from app.core.datasets import manifest
from app.core.datasets.windows import header_length


class Context(NamedTuple):
    """A teacher context: the messages before an assistant message of a train example, and that message."""

    messages: list[dict]
    teacher: dict
    example_id: str
    session_id: str

    @property
    def turn(self) -> int:
        """The teacher message's index in its example."""
        return len(self.messages)

    @property
    def key(self) -> str:
        """By content only (not the example id, which depends on the template): stable when the source is rebuilt."""
        return manifest.example_id([*self.messages, self.teacher])


def covers(longer: Context, shorter: Context) -> bool:
    """The same action seen twice because windows overlap: the shorter context is the header of the longer one's
    window plus a tail the longer context ends with."""
    head = header_length(shorter.messages)
    tail = shorter.messages[head:]
    return (len(longer.messages) > len(shorter.messages) and longer.messages[:head] == shorter.messages[:head]
            and longer.messages[len(longer.messages) - len(tail):] == tail)


def cut(rec: dict) -> Iterator[Context]:
    """Every assistant message of a record after its first user message, with the messages before it (not deduped)."""
    msgs = rec["messages"]
    for i, m in enumerate(msgs):
        if m.get("role") == "assistant" and any(x.get("role") == "user" for x in msgs[:i]):
            yield Context(msgs[:i], m, rec.get("id", ""), rec.get("session_id", ""))


def teacher_contexts(records: Iterable[dict], max_contexts: int, seed: int = 0) -> list[Context]:
    """Every assistant message of the TRAIN records with what came before it (a record with another `split` is
    skipped), once each: an action repeated by overlapping windows keeps its longest context. Capped at max_contexts
    by a stable hash of the content (not of example ids, which change with the template); ordered by session, turn."""
    found: dict[str, Context] = {}
    for rec in records:
        if rec.get("split", "train") != "train":
            continue
        for ctx in cut(rec):
            found.setdefault(ctx.key, ctx)
    same: dict[tuple[str, str], list[Context]] = {}
    for ctx in sorted(found.values(), key=lambda c: (-c.turn, c.key)):
        same.setdefault((ctx.session_id, manifest.example_id([ctx.teacher])), []).append(ctx)
    kept = [c for group in same.values() for i, c in enumerate(group) if not any(covers(b, c) for b in group[:i])]
    kept.sort(key=lambda c: hashlib.sha256(f"{seed}:{c.key}".encode()).hexdigest())
    return sorted(kept[:max_contexts], key=lambda c: (c.session_id, c.turn, c.key))


def train_records(folder: Path, heldout: frozenset[str] = frozenset()) -> Iterator[dict]:
    """A built SFT dataset's train examples only: from sessions its manifest puts in train, or replayed from an
    earlier dataset's train split; never val or test, never the held-out set. A correction's example is no teacher
    context: its pair is already in the dataset's pairs file."""
    splits = {u.id: u.split for u in manifest.read(folder).sessions}
    for rec in manifest.iter_examples(folder, "train"):
        sid = rec.get("session_id")
        if rec.get("correction_id") is not None:
            continue
        split = splits.get(sid, "train" if rec.get("source") == "replay" else None)
        if split == "train" and sid not in heldout:
            yield rec
