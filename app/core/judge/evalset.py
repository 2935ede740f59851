"""What an evaluation runs on: the held-out set (a built dataset's test split: sessions frozen out of every training
set of that base model, or a chat JSONL file), its teacher contexts, the examples for the loss, and tool schemas.

The next actions are drawn so that they are independent evidence: round-robin across the held-out sessions up to the
cap (one chatty session cannot fill it), and near-identical contexts (same session, same teacher action, same last
messages once numbers and spacing are set aside: a polling loop) counted once."""
from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass
from itertools import chain, zip_longest
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel

from app.core.datasets.contexts import Context, teacher_contexts
from app.core.judge.report import EvalSettings
from app.core.judge.rewards import REWARD_VERSION
from app.core.toolcalls import schemas
from app.core.toolcalls.convention import as_text, message_calls


class EvalConfig(BaseModel):
    """One evaluation request for the engine's worker."""

    label: str = "base"
    base_model: str = "default"
    adapter: str | None = None  # a LoRA adapter or checkpoint folder; None = the base model
    adapter_sha256: str | None = None
    eval_file: str
    eval_set: str
    eval_set_sha256: str
    schema_files: list[str] = []  # teacher calls in these files (and the eval file) give the tools' schemas
    settings: EvalSettings = EvalSettings()
    gguf_name: str = "model"  # the name an f16 GGUF converted for llama.cpp embeds (its export's file stem)
    reuse: str | None = None  # an earlier evaluation's folder (same model and settings, another set): its rows reused

    @property
    def max_new_tokens(self) -> int:  # engine.workers.mine_pairs.load_student reads it
        return self.settings.max_new_tokens

    def settings_sha256(self) -> str:
        """The settings' hash, with the reward's version past the first (rewards.REWARD_VERSION): an evaluation
        scored by another reward is not reused."""
        reward = f"|reward {REWARD_VERSION}" if REWARD_VERSION > 1 else ""
        return hashlib.sha256((self.settings.model_dump_json() + reward).encode()).hexdigest()


@dataclass
class EvalSet:
    name: str
    path: Path
    sha256: str
    base_model: str | None = None  # the model a dataset was rendered for
    schema_files: tuple[Path, ...] = ()


def read_records(path: Path) -> Iterator[dict]:
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                if isinstance(rec, dict) and isinstance(rec.get("messages"), list):
                    yield rec


def _stable(key: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


LAST = 2  # the messages before a next action that, with the action, make two contexts of a session near-identical


def _normal(text: str) -> str:
    """Text as near-identical contexts share it: numbers (times, ids, sizes, counts) masked, spacing and case set
    aside."""
    return " ".join(re.sub(r"\d+", "0", text).lower().split())


def near_key(ctx: Context) -> tuple[str, str, tuple[str, ...]]:
    """Contexts with the same near key are near-identical: the same session, the same teacher action and the same
    last messages, normalised (a polling loop's next `BashOutput` call after another "still running")."""
    tail = tuple(f"{m.get('role')}: {_normal(as_text(m)['content'])}" for m in ctx.messages[-LAST:])
    return ctx.session_id, _normal(as_text(ctx.teacher)["content"]), tail


def stratified(found: list[Context], cap: int, seed: int) -> list[Context]:
    """Up to `cap` of `found`, near-identical ones once (the earliest), drawn round-robin across sessions: each
    session's contexts in a stable hash order, the sessions in a stable hash order, one from each in turn.
    Deterministic for a seed; ordered by session, turn."""
    distinct: dict[tuple, Context] = {}
    for ctx in sorted(found, key=lambda c: (c.turn, c.key)):
        distinct.setdefault(near_key(ctx), ctx)
    by_session: dict[str, list[Context]] = {}
    for ctx in sorted(distinct.values(), key=lambda c: _stable(c.key, seed)):
        by_session.setdefault(ctx.session_id, []).append(ctx)
    turns = zip_longest(*(by_session[s] for s in sorted(by_session, key=lambda s: _stable(s, seed))))
    drawn = [c for c in chain.from_iterable(turns) if c is not None][:cap]
    return sorted(drawn, key=lambda c: (c.session_id, c.turn, c.key))


def contexts(records: list[dict], settings: EvalSettings) -> list[Context]:
    """The held-out next actions: every assistant message after a user message, once, drawn across sessions (or, for
    settings of reports written before, capped by a stable hash alone)."""
    every = ({**r, "split": "train"} for r in records)
    if settings.draw == "hash":
        return teacher_contexts(every, settings.max_contexts, settings.seed)
    return stratified(teacher_contexts(every, sys.maxsize, settings.seed), settings.max_contexts, settings.seed)


def loss_records(records: list[dict], settings: EvalSettings) -> list[dict]:
    """The records whose whole examples the teacher-forced loss runs on: capped by a stable hash of their content."""
    keyed = sorted(records, key=lambda r: _stable(json.dumps(r["messages"], sort_keys=True), settings.seed))
    return keyed[:settings.max_examples]


def sample_keys(found: list[Context], settings: EvalSettings) -> set[str]:
    """The fixed sample generations: the same prompts for every model evaluated on this set with these settings."""
    return {c.key for c in sorted(found, key=lambda c: _stable(c.key, settings.seed))[:settings.samples]}


def tool_schemas(files: list[Path]) -> dict[str, dict]:
    calls = (c for f in files if Path(f).is_file() for r in read_records(Path(f)) for m in r["messages"]
             if m.get("role") == "assistant" for c in message_calls(m))
    return schemas.infer(calls)


def prompt_tail(messages: list[dict], limit: int = 1200) -> str:
    """The end of a context as text for the side-by-side view: from the last user message on."""
    start = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    text = "\n\n".join(f"[{m['role']}] {as_text(m)['content']}" for m in messages[start:])
    return text if len(text) <= limit else "…" + text[-limit:]
