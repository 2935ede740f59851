"""The SFT dataset build: sessions -> filters -> conversations (interrupted ones cut to their completed turns) ->
near-duplicates -> splits -> windows -> rendered examples -> checks -> accepted corrections (train only) -> the
held-out set read back -> replay -> files (the corrections' preference pairs included) + manifest. Pure Python; the
tokenizer-bound work is the renderer's (engine)."""
from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from statistics import median
from typing import Any, Callable

from sqlalchemy import func, select

from app.core.base.schema import AgentSession, MessageRow, SessionMark
from app.core.base.store import Store
from app.core.capture import actors
from app.core.scrub.scrubber import Scrubber
from app.core.datasets import checks, corrections, dedup, filters, manifest, pending, windows
from app.core.datasets.catalog import Registry, default_name
from app.core.datasets.config import BuildConfig
from app.core.datasets.convert import Conversation, conversation, trimmed
from app.core.datasets.errors import BuildError
from app.core.datasets.examples import Build, Example, Renderer, slim
from app.core.datasets.splits import SPLITS, assign

Progress = Callable[[str, int, int], None]  # (phase, step, total)


def _quiet(*_: Any) -> None:
    return None


def _marks(store: Store) -> dict[str, float]:
    """Session weights a person or an agent gave (nightschool school / the MCP tool): 0 = bad, > 1 = good."""
    with store.session() as s:
        return {m.session_id: m.weight for m in s.scalars(select(SessionMark))}


def load_conversations(store: Store, config: BuildConfig, b: Build, progress: Progress,
                       skip: Any = None, reading: pending.Reading | None = None) -> list[Conversation]:
    """Stored sessions through the filters and into conversations, oldest first; `skip` (a clause on AgentSession)
    leaves sessions unread (counted in `b.unread` and in the sessions seen); `reading` (an incremental build's kept
    set) reads what it holds, counts what earlier builds of the same filters dropped, and keeps what this one drops."""
    students = actors.current(store)  # who is the student now: its sessions' verdicts first brought in line
    marks = _marks(store)
    bad = {sid for sid, weight in marks.items() if weight <= 0}
    settled: Counter = Counter()
    if reading is None:
        query = select(AgentSession).order_by(AgentSession.started_at, AgentSession.id)
        with store.session() as s:
            sessions = list(s.scalars(query.where(~skip) if skip is not None else query))
            # the rest were skipped: one count of every session (an index's length) instead of a second probe of each
            stored = s.scalar(select(func.count()).select_from(AgentSession)) if skip is not None else len(sessions)
        read, sessions = len(sessions), [sess for sess in sessions if sess.id not in bad]
        marked_bad = read - len(sessions)
    else:
        got = reading.load(store)
        sessions, stored, read, marked_bad, settled = got.sessions, got.stored, got.read, got.bad, got.settled
    b.unread = stored - read
    b.counts["sessions"] = stored
    if marked_bad:
        b.filters["marked bad"] = marked_bad
    verdicts: dict[str, str] = {}
    kept, removed = filters.apply(sessions, config.filters, verdicts)
    b.filters.update({name: removed.get(name, 0) + settled.pop(name, 0) for name, _ in filters.rules(config.filters)})
    rescued = [sess for sess in sessions if marks.get(sess.id, 1.0) > 1.0 and sess not in kept]
    if rescued:  # a session marked good is kept whatever the filters say
        b.counts["kept: marked good"] = len(rescued)
        kept = sorted(kept + rescued, key=lambda sess: (sess.started_at, sess.id))
    out = []
    with store.session() as s:
        for i, sess in enumerate(kept):
            rows = s.scalars(select(MessageRow).where(MessageRow.session_id == sess.id, MessageRow.branch == 0)
                             .order_by(MessageRow.seq)).all()
            conv = conversation(sess, rows, config.thinking, config.max_tool_output, students)
            if conv.student_turns:  # a mixed session: the teacher's turns only
                b.counts["turns of the student's own work left out"] += conv.student_turns
                if not any(m["role"] == "assistant" for m in conv.messages):
                    b.filters[filters.STUDENT_WORK] += 1
                    verdicts[sess.id] = filters.STUDENT_WORK
                    conv = None
            if conv is not None and sess.outcome == "abandoned":
                conv = _completed(conv, config, b, verdicts)
            if conv is not None:
                out.append(conv)
            progress("load", i + 1, len(kept))
    for name, n in settled.items():  # dropped by the cut of an abandoned session's tail
        b.filters[name] += n
    if reading is not None:
        reading.judged(store, verdicts)
    return out


def _completed(conv: Conversation, config: BuildConfig, b: Build,
               verdicts: dict[str, str] | None = None) -> Conversation | None:
    """An abandoned session's completed turns, if they still pass the tool-call and step filters (the unfinished
    tail's calls no longer count); counted under the filter that removes it otherwise (named in `verdicts`)."""
    cut = trimmed(conv)
    calls = sum(len(m.get("tool_calls") or []) for m in cut.messages) if cut else 0
    steps = calls + (1 if cut and not cut.messages[-1].get("tool_calls") else 0)
    f = config.filters
    failed = ("abandoned before any completed action" if cut is None else
              f"fewer than {f.min_tool_calls} tool calls" if calls < f.min_tool_calls else
              f"fewer than {f.min_steps} steps" if steps < f.min_steps else None)
    if failed:
        b.filters[failed] += 1
        if verdicts is not None:
            verdicts[conv.session_id] = failed
        return None
    b.trimmed.add(conv.session_id)
    return cut


def _split_sessions(convs: list[Conversation], config: BuildConfig, heldout: frozenset[str],
                    prior: dict[str, str]) -> dict[str, str]:
    """Sub-agents follow their root session, so a task never straddles splits; a session keeps its earlier split."""
    return assign({c.session_id: c.parent_id or c.session_id for c in convs}, config.val_share, config.test_share,
                  heldout, prior)


def _examples(conv: Conversation, split: str, config: BuildConfig, renderer: Renderer, b: Build,
              scrubber: Scrubber, heldout_by: str = "") -> None:
    cut = windows.decisions if config.windows == "decisions" else windows.windows
    found, fitting = cut(conv.messages, config.max_length, renderer.count)
    unit = "decisions" if config.windows == "decisions" else "turn blocks"
    b.filters[f"over max length ({unit})"] += fitting.too_long
    for reason, n in fitting.dropped.items():
        b.counts[f"{unit} dropped: {reason}"] += n
    if fitting.alone:
        b.counts["long decisions: windows with the first request cut further"] += fitting.alone
    if config.windows == "decisions":  # every teacher action: a window, or dropped (counted above)
        b.counts["decisions"] += fitting.decisions
        b.counts["decision windows"] += len(found)
    b.cuts += fitting.cuts
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
        slim(rendered)
        if len(rendered["input_ids"]) < config.filters.min_tokens:
            b.filters[f"shorter than {config.filters.min_tokens} tokens (examples)"] += 1
            continue
        b.examples.append(Example(manifest.example_id(msgs, renderer.template_sha256), conv.session_id, split, w, msgs,
                                  rendered, source="heldout" if split == "test" else "new", heldout_by=heldout_by))


def _heldout(store: Store, config: BuildConfig, b: Build, renderer: Renderer, by: dict[str, str]) -> dict[str, int]:
    """Every held-out session this build did not render itself, read back from the newest earlier dataset whose
    test split holds it: so this build's test split is the whole held-out set. Returns dataset -> examples read."""
    fresh = {e.session_id for e in b.examples if e.split == "test"}
    missing, found, taken = set(by) - fresh, {}, {e.id for e in b.examples}
    for ds in reversed(Registry(store).earlier(config.base_model)):
        if not missing:
            break
        for rec in manifest.iter_examples(Path(ds.path), "test"):
            sid = rec["session_id"]
            if sid in missing and found.setdefault(sid, ds.name) == ds.name:
                msgs = rec["messages"]
                key = manifest.example_id(msgs, renderer.template_sha256)
                example = Example(key, sid, "test", rec.get("window", 0),
                                  msgs, slim(renderer.render(msgs)), source="heldout",
                                  heldout_by=rec.get("heldout_by") or by[sid] or ds.name)
                if example.id not in taken:
                    taken.add(example.id)
                    b.examples.append(example)
        missing -= set(found)
    if found:
        b.counts["held-out sessions read back"] = len(found)
    return dict(sorted(Counter(found.values()).items()))


def _replay(store: Store, config: BuildConfig, b: Build, renderer: Renderer, heldout: frozenset[str]) -> list[str]:
    """Add `config.replay` share of the train split from earlier datasets' train examples (stable choice by hash);
    with `learned_from`, from those datasets only (what was trained on)."""
    earlier = [ds for ds in Registry(store).earlier(config.base_model)
               if config.learned_from is None or ds.name in config.learned_from]
    fresh = sum(1 for e in b.examples if e.split == "train")
    want = round(fresh * config.replay / (1 - config.replay)) if config.replay else 0
    if not earlier or not want:
        return []
    taken = {e.id for e in b.examples}
    apart = heldout | set(b.conversations)  # once (a union per record cost the held-out set's size each)
    pool: dict[str, dict] = {}
    for ds in earlier:
        for rec in manifest.iter_examples(Path(ds.path), "train"):
            if rec["id"] not in taken and rec["session_id"] not in apart:
                pool.setdefault(rec["id"], rec)
    rank = sorted(pool, key=lambda i: hashlib.sha256(f"{config.seed}:{i}".encode()).hexdigest())
    for example_id in rank[:want]:
        rec = pool[example_id]
        msgs = rec["messages"]
        rendered = renderer.render(msgs)
        provenance = {k: rec[k] for k in corrections.PROVENANCE if k in rec}
        if provenance:  # a correction's example replayed: still only its last turn trained
            corrections.train_last_turn(msgs, rendered, renderer)
        b.examples.append(Example(manifest.example_id(msgs, renderer.template_sha256), rec["session_id"], "train",
                                  rec.get("window", 0), msgs, slim(rendered), source="replay",
                                  provenance=provenance))
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


def build(store: Store, config: BuildConfig, renderer: Renderer, out: Path,
          progress: Progress = _quiet) -> manifest.Manifest:
    """Build into `out` (created); return the manifest written there. Raises BuildError when nothing is left."""
    b, registry = Build(), Registry(store)
    mode, name = _mode(store, config), config.name or default_name("sft")
    heldout = registry.heldout(config.base_model)
    if mode == "incremental":  # the kept set of what is left to read, else a probe of every stored session
        kept = pending.reading(store, config)
        unread = registry.unchanged_since_used(config.base_model, config.learned_from) if kept is None else None
        convs = load_conversations(store, config, b, progress, unread, kept)
    else:
        convs = load_conversations(store, config, b, progress)
    if mode == "incremental":  # what earlier datasets hold is read for the sessions read only
        used = registry.used(config.base_model, config.learned_from, ids={c.session_id for c in convs})
        fresh = [c for c in convs if (c.session_id, c.content_sha256) not in used]
        b.filters[_used_words(config)] = b.unread + len(convs) - len(fresh)
        convs = fresh
    dropped = dedup.near_duplicates(((c.session_id, c.text()) for c in convs), config.filters.near_duplicate)
    b.filters["near-duplicate (MinHash)"] = len(dropped)
    convs = [c for c in convs if c.session_id not in dropped]
    b.conversations = {c.session_id: c for c in convs}
    prior = registry.prior_splits(config.base_model, ids={i for c in convs for i in (c.session_id, c.parent_id) if i})
    b.splits = _split_sessions(convs, config, heldout, prior)
    by = registry.heldout_by(config.base_model)  # held-out session -> the dataset that held it out
    by.update({sid: name for sid, split in b.splits.items() if split == "test" and sid not in by})
    scrubber = Scrubber()
    for i, conv in enumerate(convs):
        _examples(conv, b.splits[conv.session_id], config, renderer, b, scrubber, by.get(conv.session_id, ""))
        progress("render", i + 1, len(convs))
    corrections.take(store, config, b, renderer, mode, scrubber)
    _nonempty(b, mode, config)
    _count_trimmed(b)
    _count_cuts(b)
    held = Held(sorted(set(by) - heldout), len(by), _heldout(store, config, b, renderer, by))
    replayed_from = _replay(store, config, b, renderer, frozenset(by)) if mode == "incremental" else []
    _overlap(b)
    return _write(out, config.model_copy(update={"name": name}), mode, renderer, b, held, replayed_from, progress)


def _used_words(config: BuildConfig) -> str:
    """The incremental cut's name in the build's filters."""
    return "already in an earlier dataset" if config.learned_from is None else "already trained on or held out"


def _nonempty(b: Build, mode: str, config: BuildConfig) -> None:
    """Nothing new rendered: refuse (the held-out set read back alone is not a dataset)."""
    if b.examples:
        return
    cut = _used_words(config)
    fix = (f"every session is {cut}: capture more work"
           + (", or rebuild everything with mode full" if config.learned_from is None else "")
           if mode == "incremental" and b.filters[cut] else
           "raise the max length: the turns do not fit in it" if any(
               n for k, n in b.filters.items() if k.startswith("over max length")) else
           "capture more sessions, or loosen the filters (fewer tool calls or steps required)")
    raise BuildError("no examples to build", why=_why_empty(b), fix=fix)


@dataclass
class Held:
    """What a build did to the held-out set: sessions it added, the set's size after it, examples read back."""

    added: list[str]
    sessions: int
    read_from: dict[str, int]


def _count_trimmed(b: Build) -> None:
    """How many interrupted sessions gave their completed turns, and how many examples they add."""
    kept = b.trimmed & set(b.conversations)  # near-duplicates and sessions of earlier datasets are not this build's
    if kept:
        b.counts["abandoned sessions trimmed"] = len(kept)
        b.counts["examples from trimmed sessions"] = sum(1 for e in b.examples if e.session_id in kept)


def _count_cuts(b: Build) -> None:
    """How many tool results and user messages were shortened to fit a window, and by how many characters."""
    if not b.cuts:
        return
    for role, label in (("tool", "tool results shortened"), ("user", "user messages shortened")):
        b.counts[label] = sum(1 for r, _ in b.cuts if r == role)
    chars = [n for _, n in b.cuts]
    b.counts["characters cut"] = sum(chars)
    b.counts["characters cut (median per message)"] = int(median(chars))


def _why_empty(b: Build) -> str:
    removed = ", ".join(f"{n} {name}" for name, n in b.filters.items() if n)
    return f"{b.counts['sessions']} sessions stored; removed: {removed or 'none'}; excluded by checks: " \
           f"{b.counts['excluded']}"


def _write(out: Path, config: BuildConfig, mode: str, renderer: Renderer, b: Build, held: Held,
           replayed_from: list[str], progress: Progress) -> manifest.Manifest:
    out.mkdir(parents=True, exist_ok=True)
    by_split: dict[str, list[Example]] = defaultdict(list)
    for e in sorted(b.examples, key=lambda e: (e.session_id, e.window, e.id)):
        by_split[e.split].append(e)
    for i, split in enumerate(SPLITS):
        manifest.write_jsonl(out / manifest.SPLIT_FILES[split], [e.record() for e in by_split[split]])
        progress("write", i + 1, len(SPLITS) + 1)
    manifest.write_jsonl(out / manifest.PREVIEW, [{"id": e.id, "split": e.split, "segments": e.rendered["segments"]}
                                    for s in SPLITS for e in by_split[s]])
    (out / manifest.REPORT).write_text(json.dumps(_report(b), indent=1, ensure_ascii=False), encoding="utf-8")
    if b.pairs:
        manifest.write_jsonl(out / manifest.PAIRS, sorted(b.pairs, key=lambda r: (r["correction_id"], r["id"])))
    man = manifest.Manifest(
        name=config.name or default_name("sft"), base_model=config.base_model, base_model_label=renderer.label,
        template_sha256=renderer.template_sha256, convention=renderer.convention, mode=mode,
        config=config.model_dump(), created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        fingerprint=manifest.fingerprint({s: [e.id for e in by_split[s]] for s in SPLITS}, renderer.template_sha256),
        splits={s: _size(by_split[s]) for s in SPLITS}, sessions=_uses(b), corrections=b.corrections,
        filters=dict(b.filters),
        counts=dict(b.counts), replayed_from=replayed_from, heldout_added=held.added,
        heldout_sessions=held.sessions, heldout_from=held.read_from)
    manifest.write(out, man)
    progress("write", len(SPLITS) + 1, len(SPLITS) + 1)
    return man


def _size(examples: list[Example]) -> manifest.SplitSize:
    return manifest.SplitSize(examples=len(examples), sessions=len({e.session_id for e in examples}),
                       tokens=sum(len(e.rendered["input_ids"]) for e in examples),
                       trained_tokens=sum(sum(e.rendered["assistant_masks"]) for e in examples))


def _uses(b: Build) -> list[manifest.SessionUse]:
    per = Counter(e.session_id for e in b.examples if e.source == "new")
    return [manifest.SessionUse(id=sid, split=b.splits[sid], examples=per.get(sid, 0), content_sha256=c.content_sha256)
            for sid, c in sorted(b.conversations.items())]


def _report(b: Build) -> dict:
    return {"filters": dict(b.filters), "counts": dict(b.counts), "excluded": b.excluded}
