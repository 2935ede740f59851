"""What an evaluation runs on: the held-out set (a built dataset's test split: sessions frozen out of every training
set of that base model, or a chat JSONL file), its teacher contexts, the examples for the loss, and tool schemas.

The next actions are drawn so that they are independent evidence: round-robin across the held-out sessions up to the
cap (one chatty session cannot fill it), and near-identical contexts (same session, same teacher action, same last
messages once numbers and spacing are set aside: a polling loop) counted once.

A context a blind-test pair was made of (datasets/pair_records.blind_contexts: every held-out context a blind trial
found the student's answer worse on) is SET ASIDE: it is no next action of any draw (the judge's, the blind test's),
nor is a context near-identical to it, and no loss example holds it; the draws take others instead. The set's sha256
then covers what was set aside (`set_aside`), so an evaluation from before is never taken for one after."""
from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass, replace
from itertools import chain, zip_longest
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel

from app.core.datasets import manifest
from app.core.datasets.contexts import Context, covers, cut, teacher_contexts
from app.core.judge.nextaction import RULES_VERSION
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
    set_aside: list[str] = []  # context keys no draw takes (blind-test pairs were made of them): EvalSet.set_aside

    @property
    def max_new_tokens(self) -> int:  # engine.workers.mine_pairs.load_student reads it
        return self.settings.max_new_tokens

    def settings_sha256(self) -> str:
        """The settings' hash, with the reward's and the next-action rules' versions past the first
        (rewards.REWARD_VERSION, nextaction.RULES_VERSION): an evaluation scored by other rules is not reused."""
        reward = f"|reward {REWARD_VERSION}" if REWARD_VERSION > 1 else ""
        rules = f"|rules {RULES_VERSION}" if RULES_VERSION > 1 else ""
        return hashlib.sha256((self.settings.model_dump_json() + reward + rules).encode()).hexdigest()


@dataclass
class EvalSet:
    name: str
    path: Path
    sha256: str
    base_model: str | None = None  # the model a dataset was rendered for
    schema_files: tuple[Path, ...] = ()
    set_aside: frozenset[str] = frozenset()  # context keys no draw takes; `sha256` covers them (`set_aside`)


def set_aside(evset: EvalSet, keys: frozenset[str] | set[str]) -> EvalSet:
    """`evset` as read from its file, with the contexts of `keys` set aside: its sha256 is then of the file's sha256
    and the sorted keys (no key: the file's, as before), so the evaluation cache, keyed by it, never serves an
    evaluation that drew them; the name stays. A key the set does not hold changes its sha256 too (harmless: one
    evaluation again, whose answers an earlier one of the same model and settings gives by key)."""
    if not keys:
        return evset
    digest = hashlib.sha256("\n".join([evset.sha256, *sorted(keys)]).encode()).hexdigest()
    return replace(evset, sha256=digest, set_aside=frozenset(keys))


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


def by_hash(found: list[Context], cap: int, seed: int) -> list[Context]:
    """Up to `cap` of `found` by a stable hash of their keys alone (the draw of reports written before); ordered by
    session, turn."""
    drawn = sorted(found, key=lambda c: _stable(c.key, seed))[:cap]
    return sorted(drawn, key=lambda c: (c.session_id, c.turn, c.key))


def _action(ctx: Context) -> tuple[str, str]:
    return ctx.session_id, manifest.example_id([ctx.teacher])


class Aside:
    """What of a set's records the contexts of `keys` leave out: those contexts, every one near-identical to one (a
    polling loop's next turn: `near_key`), the same action seen in an overlapping window (`contexts.covers`), and the
    records that hold any of them."""

    def __init__(self, records: list[dict], keys: frozenset[str] | set[str]) -> None:
        self.keys = frozenset(keys)
        held = [c for r in records for c in cut(r) if c.key in self.keys] if self.keys else []
        self.near = {near_key(c) for c in held}
        self.actions: dict[tuple[str, str], list[Context]] = {}
        for c in held:
            self.actions.setdefault(_action(c), []).append(c)

    def holds(self, ctx: Context) -> bool:
        if not self.keys:
            return False
        return (ctx.key in self.keys or near_key(ctx) in self.near
                or any(covers(k, ctx) for k in self.actions.get(_action(ctx), ())))

    def holds_record(self, rec: dict) -> bool:
        return bool(self.keys) and any(self.holds(c) for c in cut(rec))


def contexts(records: list[dict], settings: EvalSettings, aside: frozenset[str] = frozenset()) -> list[Context]:
    """The held-out next actions: every assistant message after a user message, once, those set aside (`aside`:
    context keys, EvalSet.set_aside) and near-identical ones left out, drawn across sessions (or, for settings of
    reports written before, capped by a stable hash alone): the draw takes others in their place."""
    found = teacher_contexts(({**r, "split": "train"} for r in records), sys.maxsize, settings.seed)
    if aside:
        left = Aside(records, aside)
        found = [c for c in found if not left.holds(c)]
    if settings.draw == "hash":
        return by_hash(found, settings.max_contexts, settings.seed)
    return stratified(found, settings.max_contexts, settings.seed)


def loss_records(records: list[dict], settings: EvalSettings, aside: frozenset[str] = frozenset()) -> list[dict]:
    """The records whose whole examples the teacher-forced loss runs on: capped by a stable hash of their content;
    none that holds a context set aside (`aside`, as `contexts` leaves them out): others take their place."""
    if aside:
        left = Aside(records, aside)
        records = [r for r in records if not left.holds_record(r)]
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
