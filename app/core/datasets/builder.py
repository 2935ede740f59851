"""The SFT dataset build: sessions -> filters -> conversations -> near-duplicates -> splits -> windows -> rendered
examples -> checks -> replay -> files + manifest. Pure Python; the tokenizer-bound work is the renderer's (engine)."""
from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Protocol

from sqlalchemy import select

from app.core.base.schema import AgentSession, MessageRow, SessionMark
from app.core.base.store import Store
from app.core.capture.scrub import Scrubber
from app.core.datasets import checks, dedup, filters, manifest as M, windows
from app.core.datasets.catalog import Registry, default_name
from app.core.datasets.config import BuildConfig
from app.core.datasets.convert import Conversation, conversation
from app.core.datasets.errors import BuildError  # noqa: F401 - raised here, imported from here by callers
from app.core.datasets.splits import SPLITS, split_of

Progress = Callable[[str, int, int], None]  # (phase, step, total)


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
    source: str = "new"  # new | replay

    def record(self) -> dict:
        masks = self.rendered["assistant_masks"]
        return {"id": self.id, "session_id": self.session_id, "window": self.window, "source": self.source,
                "messages": self.messages, "input_ids": self.rendered["input_ids"], "assistant_masks": masks,
                "tokens": len(masks), "trained": sum(masks)}


@dataclass
class Build:
    """What a build found, kept, excluded and why (becomes report.json and the manifest's counts)."""

    filters: Counter = field(default_factory=Counter)
    counts: Counter = field(default_factory=Counter)
    excluded: list[dict] = field(default_factory=list)
    examples: list[Example] = field(default_factory=list)
    conversations: dict[str, Conversation] = field(default_factory=dict)
    splits: dict[str, str] = field(default_factory=dict)  # session id -> split

    def exclude(self, session_id: str, window: int, problems: list[checks.Problem]) -> None:
        self.counts["excluded"] += 1
        for p in problems:
            self.counts[f"excluded: {p.check}"] += 1
        self.excluded.append({"session_id": session_id, "window": window,
                              "problems": [p.as_dict() for p in problems]})


def _quiet(*_: Any) -> None:
    return None


def _marks(store: Store) -> dict[str, float]:
    """Session weights a person or an agent gave (nightschool school / the MCP tool): 0 = bad, > 1 = good."""
    with store.session() as s:
        return {m.session_id: m.weight for m in s.scalars(select(SessionMark))}


def load_conversations(store: Store, config: BuildConfig, b: Build, progress: Progress) -> list[Conversation]:
    """Stored sessions through the filters and into conversations, oldest first."""
    with store.session() as s:
        sessions = list(s.scalars(select(AgentSession).order_by(AgentSession.started_at, AgentSession.id)))
    b.counts["sessions"] = len(sessions)
    marks = _marks(store)
    bad = {sid for sid, weight in marks.items() if weight <= 0}
    sessions = [sess for sess in sessions if sess.id not in bad]
    if len(sessions) < b.counts["sessions"]:
        b.filters["marked bad"] = b.counts["sessions"] - len(sessions)
    kept, removed = filters.apply(sessions, config.filters)
    b.filters.update({name: removed.get(name, 0) for name, _ in filters.rules(config.filters)})
    rescued = [sess for sess in sessions if marks.get(sess.id, 1.0) > 1.0 and sess not in kept]
    if rescued:  # a session marked good is kept whatever the filters say
        b.counts["kept: marked good"] = len(rescued)
        kept = sorted(kept + rescued, key=lambda sess: (sess.started_at, sess.id))
    out = []
    with store.session() as s:
        for i, sess in enumerate(kept):
            rows = s.scalars(select(MessageRow).where(MessageRow.session_id == sess.id, MessageRow.branch == 0)
                             .order_by(MessageRow.seq)).all()
            out.append(conversation(sess, rows, config.thinking, config.max_tool_output))
            progress("load", i + 1, len(kept))
    return out


def _split_sessions(convs: list[Conversation], config: BuildConfig, heldout: frozenset[str]) -> dict[str, str]:
    """Sub-agents follow their root session, so a task never straddles splits."""
    return {c.session_id: split_of(c.parent_id or c.session_id, config.val_share, config.test_share, heldout)
            for c in convs}


def _examples(conv: Conversation, split: str, config: BuildConfig, renderer: Renderer, b: Build,
              scrubber: Scrubber) -> None:
    found, too_long = windows.windows(conv.messages, config.max_length, renderer.count)
    b.filters["over max length (turn blocks)"] += too_long
    for w, msgs in enumerate(found):
        problems = checks.standard({"messages": msgs}, scrubber)
        rendered = None if problems else renderer.render(msgs)
        if rendered is not None:
            problems += [checks.Problem("round_trip", p) for p in renderer.deep(msgs, rendered)]
            if len(rendered["input_ids"]) > config.max_length:
                problems.append(checks.Problem("over_length", f"{len(rendered['input_ids'])} tokens > "
                                                              f"{config.max_length}"))
        if problems:
            b.exclude(conv.session_id, w, problems)
            continue
        _slim(rendered)
        if len(rendered["input_ids"]) < config.filters.min_tokens:
            b.filters[f"shorter than {config.filters.min_tokens} tokens (examples)"] += 1
            continue
        b.examples.append(Example(M.example_id(msgs, renderer.template_sha256), conv.session_id, split, w, msgs,
                                  rendered))


def _slim(rendered: dict) -> dict:
    """Once checked, keep only what is written (memory: 10 000 sessions hold every example until the write)."""
    for key in ("text", "offsets", "problems"):
        rendered.pop(key, None)
    return rendered


def _replay(store: Store, config: BuildConfig, b: Build, renderer: Renderer, heldout: frozenset[str]) -> list[str]:
    """Add `config.replay` share of the train split from earlier datasets' train examples (stable choice by hash)."""
    earlier = Registry(store).earlier(config.base_model)
    fresh = sum(1 for e in b.examples if e.split == "train")
    want = round(fresh * config.replay / (1 - config.replay)) if config.replay else 0
    if not earlier or not want:
        return []
    taken = {e.id for e in b.examples}
    building = set(b.conversations)
    pool: dict[str, dict] = {}
    for ds in earlier:
        for rec in M.iter_examples(Path(ds.path), "train"):
            if rec["id"] not in taken and rec["session_id"] not in heldout | building:
                pool.setdefault(rec["id"], rec)
    rank = sorted(pool, key=lambda i: hashlib.sha256(f"{config.seed}:{i}".encode()).hexdigest())
    for example_id in rank[:want]:
        rec = pool[example_id]
        msgs = rec["messages"]
        b.examples.append(Example(M.example_id(msgs, renderer.template_sha256), rec["session_id"], "train",
                                  rec.get("window", 0), msgs, _slim(renderer.render(msgs)), source="replay"))
    b.counts["replayed"] = min(want, len(rank))
    return [ds.name for ds in earlier]


def _overlap(b: Build) -> None:
    """No session and no example in two splits (fail-closed: a bug, not a data problem)."""
    seen: dict[str, str] = {}
    for e in b.examples:
        for key in (f"session:{e.session_id}", f"example:{e.id}"):
            if seen.setdefault(key, e.split) != e.split:
                raise BuildError("split overlap", why=f"{key} is in both {seen[key]} and {e.split}",
                                 fix="this is a bug; the dataset was not written")


def _mode(store: Store, config: BuildConfig) -> str:
    if config.mode != "auto":
        return config.mode
    return "incremental" if Registry(store).earlier(config.base_model) else "full"


def build(store: Store, config: BuildConfig, renderer: Renderer, out: Path, progress: Progress = _quiet) -> M.Manifest:
    """Build into `out` (created); return the manifest written there. Raises BuildError when nothing is left."""
    b, registry = Build(), Registry(store)
    mode = _mode(store, config)
    heldout = registry.heldout(config.base_model)
    convs = load_conversations(store, config, b, progress)
    if mode == "incremental":
        used = registry.used(config.base_model)
        fresh = [c for c in convs if (c.session_id, c.content_sha256) not in used]
        b.filters["already in an earlier dataset"] = len(convs) - len(fresh)
        convs = fresh
    dropped = dedup.near_duplicates(((c.session_id, c.text()) for c in convs), config.filters.near_duplicate)
    b.filters["near-duplicate (MinHash)"] = len(dropped)
    convs = [c for c in convs if c.session_id not in dropped]
    b.conversations = {c.session_id: c for c in convs}
    b.splits = _split_sessions(convs, config, heldout)
    scrubber = Scrubber()
    for i, conv in enumerate(convs):
        _examples(conv, b.splits[conv.session_id], config, renderer, b, scrubber)
        progress("render", i + 1, len(convs))
    replayed_from = _replay(store, config, b, renderer, heldout) if mode == "incremental" else []
    _overlap(b)
    if not b.examples:
        fix = ("every session is already in an earlier dataset: capture more work, or rebuild everything with "
               "mode full" if mode == "incremental" and b.filters["already in an earlier dataset"] else
               "raise the max length: the turns do not fit in it" if b.filters["over max length (turn blocks)"] else
               "capture more sessions, or loosen the filters (fewer tool calls or steps required)")
        raise BuildError("no examples to build", why=_why_empty(b), fix=fix)
    return _write(out, config, mode, renderer, b, heldout, replayed_from, progress)


def _why_empty(b: Build) -> str:
    removed = ", ".join(f"{n} {name}" for name, n in b.filters.items() if n)
    return f"{b.counts['sessions']} sessions stored; removed: {removed or 'none'}; excluded by checks: " \
           f"{b.counts['excluded']}"


def _write(out: Path, config: BuildConfig, mode: str, renderer: Renderer, b: Build, heldout: frozenset[str],
           replayed_from: list[str], progress: Progress) -> M.Manifest:
    out.mkdir(parents=True, exist_ok=True)
    by_split: dict[str, list[Example]] = defaultdict(list)
    for e in sorted(b.examples, key=lambda e: (e.session_id, e.window, e.id)):
        by_split[e.split].append(e)
    for i, split in enumerate(SPLITS):
        M.write_jsonl(out / M.SPLIT_FILES[split], [e.record() for e in by_split[split]])
        progress("write", i + 1, len(SPLITS) + 1)
    M.write_jsonl(out / M.PREVIEW, [{"id": e.id, "split": e.split, "segments": e.rendered["segments"]}
                                    for s in SPLITS for e in by_split[s]])
    (out / M.REPORT).write_text(json.dumps(_report(b), indent=1, ensure_ascii=False), encoding="utf-8")
    frozen = [] if heldout or not config.freeze_heldout else sorted(
        {c.session_id for c in b.conversations.values() if b.splits[c.session_id] == "test"})
    man = M.Manifest(
        name=config.name or default_name("sft"), base_model=config.base_model, base_model_label=renderer.label,
        template_sha256=renderer.template_sha256, convention=renderer.convention, mode=mode,
        config=config.model_dump(), created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        fingerprint=M.fingerprint({s: [e.id for e in by_split[s]] for s in SPLITS}, renderer.template_sha256),
        splits={s: _size(by_split[s]) for s in SPLITS}, sessions=_uses(b), filters=dict(b.filters),
        counts=dict(b.counts), replayed_from=replayed_from, heldout_frozen=frozen)
    M.write(out, man)
    progress("write", len(SPLITS) + 1, len(SPLITS) + 1)
    return man


def _size(examples: list[Example]) -> M.SplitSize:
    return M.SplitSize(examples=len(examples), sessions=len({e.session_id for e in examples}),
                       tokens=sum(len(e.rendered["input_ids"]) for e in examples),
                       trained_tokens=sum(sum(e.rendered["assistant_masks"]) for e in examples))


def _uses(b: Build) -> list[M.SessionUse]:
    per = Counter(e.session_id for e in b.examples if e.source == "new")
    return [M.SessionUse(id=sid, split=b.splits[sid], examples=per.get(sid, 0), content_sha256=c.content_sha256)
            for sid, c in sorted(b.conversations.items())]


def _report(b: Build) -> dict:
    return {"filters": dict(b.filters), "counts": dict(b.counts), "excluded": b.excluded}
