"""Preference pairs (DPO / ORPO / KTO): for a teacher context from an SFT dataset's train split, the student's next
action (chosen = the teacher's recorded action, rejected = the student's) plus the user's dropped preference_v1
files and the source dataset's corrections (chosen = an accepted correction, rejected = the answer the served student
gave; its `pairs.jsonl`). A context where the student already agrees with the teacher is not a pair. Pure Python:
generation is the engine's (`engine.workers.mine_pairs`), behind the `Student` protocol (a llama.cpp student can stand in
later).

Record (preference_v1, conversational), the same fields in every record: {"id", "source": "student" | "dropped" |
"correction", "session_id", "example_id" (the source SFT example), "turn" (the teacher message's index in it; null
for dropped and correction pairs), "truncated" (the student's answer hit max_new_tokens), "file_sha256" (dropped: the
file it came from), "correction_id", "experience_id", "teacher_model" (correction pairs: the provenance; else null,
"", ""),
"prompt": [{role, content}…], "chosen": [{role: assistant, content}], "rejected": [{role: assistant, content}]};
every message is plain text with tool calls in the Hermes convention (`<tool_call>{"name", "arguments"}</tool_call>`),
so any trainer and any template can use it.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Protocol

from pydantic import BaseModel, Field
from sqlalchemy import select

from app.core.base.fingerprint import sha256_dir, sha256_file
from app.core.base.schema import BuiltDataset, DatasetFile
from app.core.base.store import Store
from app.core.scrub.scrubber import Scrubber
from app.core.datafiles.formats import SPECS, record_problem
from app.core.datasets import checks, manifest
from app.core.datasets.catalog import Registry, default_name
from app.core.datasets.errors import BuildError
from app.core.datasets.windows import header_length
from app.core.toolcalls.agreement import exact_agreement
from app.core.toolcalls.convention import as_text, parse_student

SPEC_ID = "preference_v1"
Progress = Callable[[str, int, int], None]  # (phase, step, total)
Log = Callable[[str], None]


class PairsConfig(BaseModel):
    """One pairs request: the student (base model + optional LoRA adapter or checkpoint folder), where the teacher
    contexts come from, how many, and how long the student may answer."""

    name: str | None = None
    base_model: str = "default"
    adapter: str | None = None  # a LoRA adapter or checkpoint folder (adapter_config.json); None = the base model
    source: str | None = None  # an SFT dataset's name; None = the latest SFT dataset of base_model
    max_contexts: int = Field(200, ge=1)
    max_new_tokens: int = Field(256, ge=1, le=8192)
    include_dropped: bool = True  # the user's accepted preference_v1 files join the pairs
    include_corrections: bool = True  # the source dataset's corrections (its pairs.jsonl) join the pairs
    seed: int = 0


class Student(Protocol):
    """The model that answers: greedy, deterministic. `generate` returns (text, finished: stopped before the limit)."""

    label: str
    template_sha256: str

    def generate(self, messages: list[dict]) -> tuple[str, bool]: ...
    def count(self, messages: list[dict]) -> int: ...  # tokens of a rendered message list


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


# --- teacher contexts ---------------------------------------------------------------------------------------------

def _covers(longer: Context, shorter: Context) -> bool:
    """The same action seen twice because windows overlap: the shorter context is the header of the longer one's
    window plus a tail the longer context ends with."""
    head = header_length(shorter.messages)
    tail = shorter.messages[head:]
    return (len(longer.messages) > len(shorter.messages) and longer.messages[:head] == shorter.messages[:head]
            and longer.messages[len(longer.messages) - len(tail):] == tail)


def teacher_contexts(records: Iterable[dict], max_contexts: int, seed: int = 0) -> list[Context]:
    """Every assistant message of the TRAIN records with what came before it (a record with another `split` is
    skipped), once each: an action repeated by overlapping windows keeps its longest context. Capped at max_contexts
    by a stable hash of the content (not of example ids, which change with the template); ordered by session, turn."""
    found: dict[str, Context] = {}
    for rec in records:
        if rec.get("split", "train") != "train":
            continue
        msgs = rec["messages"]
        for i, m in enumerate(msgs):
            if m.get("role") == "assistant" and any(x.get("role") == "user" for x in msgs[:i]):
                ctx = Context(msgs[:i], m, rec.get("id", ""), rec.get("session_id", ""))
                found.setdefault(ctx.key, ctx)
    same: dict[tuple[str, str], list[Context]] = {}
    for ctx in sorted(found.values(), key=lambda c: (-c.turn, c.key)):
        same.setdefault((ctx.session_id, manifest.example_id([ctx.teacher])), []).append(ctx)
    kept = [c for group in same.values() for i, c in enumerate(group) if not any(_covers(b, c) for b in group[:i])]
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


# --- records ------------------------------------------------------------------------------------------------------

def pair_id(prompt: list[dict], chosen: list[dict], rejected: list[dict]) -> str:
    return manifest.example_id([*prompt, {"role": "chosen"}, *chosen, {"role": "rejected"}, *rejected])


def _record(p: list[dict], c: list[dict], r: list[dict], **fields: Any) -> dict:
    """Every record has the same fields (one table for any trainer's loader), the messages last."""
    base = {"id": pair_id(p, c, r), "source": "student", "session_id": "", "example_id": "", "turn": None,
            "truncated": False, "file_sha256": "", "correction_id": None, "experience_id": "", "teacher_model": ""}
    return {**base, **fields, "prompt": p, "chosen": c, "rejected": r}


def pair_record(prompt: list[dict], chosen: dict, rejected: dict, *, session_id: str = "", example_id: str = "",
                turn: int | None = None, truncated: bool = False, **provenance: Any) -> dict:
    """A preference_v1 record in conversational form: prompt messages, [chosen], [rejected], all as Hermes text.
    `truncated`: the student's answer was cut at max_new_tokens; `provenance`: source and a correction's fields."""
    return _record([as_text(m) for m in prompt], [as_text(chosen)], [as_text(rejected)], session_id=session_id,
                   example_id=example_id, turn=turn, truncated=truncated, **provenance)


def _side(value: Any, role: str) -> list[dict]:
    return [{"role": role, "content": value}] if isinstance(value, str) else value


def conversational(rec: dict, file_sha256: str) -> dict:
    """A dropped preference_v1 record (strings or message lists) in the same conversational text form."""
    prompt, chosen, rejected = _side(rec["prompt"], "user"), _side(rec["chosen"], "assistant"), \
        _side(rec["rejected"], "assistant")
    p, c, r = [as_text(m) for m in prompt], [as_text(m) for m in chosen], [as_text(m) for m in rejected]
    return _record(p, c, r, source="dropped", file_sha256=file_sha256)


def _read_records(path: Path) -> Iterator[Any]:
    text = path.read_text(encoding="utf-8", errors="replace").lstrip("\ufeff")
    if text.lstrip().startswith("["):
        try:
            yield from json.loads(text)
        except json.JSONDecodeError:
            return
        return
    for line in text.splitlines():
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def dropped_pairs(store: Store) -> tuple[list[dict], list[str], list[str]]:
    """(records, files used, files skipped with why) from the accepted preference_v1 files the user dropped; a file
    that changed or went away since it was checked is skipped, and so is every record failing the spec."""
    with store.session() as s:
        rows = list(s.scalars(select(DatasetFile).where(DatasetFile.spec == SPEC_ID, DatasetFile.accepted == 1)
                              .order_by(DatasetFile.id)))
    spec = SPECS[SPEC_ID]
    records: dict[str, dict] = {}
    used: list[str] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for row in rows:
        if row.sha256 in seen:
            continue
        seen.add(row.sha256)
        path = Path(row.path).expanduser()
        if not path.is_file():
            skipped.append(f"{row.path}: the file is gone")
            continue
        if sha256_file(path) != row.sha256:
            skipped.append(f"{row.path}: the file changed after it was added (add it again)")
            continue
        for rec in _read_records(path):
            if record_problem(spec, rec) is None:
                out = conversational(rec, row.sha256)
                records.setdefault(out["id"], out)
        used.append(row.path)
    return list(records.values()), used, skipped


# --- the build ------------------------------------------------------------------------------------------------------

@dataclass
class Plan:
    """What a pairs build will do, settled before the (slow) student is loaded."""

    config: PairsConfig
    source: BuiltDataset
    source_manifest: manifest.Manifest
    contexts: list[Context]
    adapter_sha256: str = ""
    dropped: list[dict] = field(default_factory=list)
    dropped_files: list[str] = field(default_factory=list)
    dropped_skipped: list[str] = field(default_factory=list)
    skipped_heldout: int = 0
    corrections: list[dict] = field(default_factory=list)  # the source dataset's correction pairs


def _source(registry: Registry, config: PairsConfig) -> BuiltDataset:
    if config.source:
        found = registry.get(config.source)
        if found is None:
            raise BuildError(f"there is no dataset named {config.source!r}", fix="choose a built SFT dataset")
        if found.kind != "sft":
            raise BuildError(f"{config.source} is a {found.kind} dataset, not an SFT dataset",
                             why="teacher contexts come from an SFT dataset's train split",
                             fix="choose an SFT dataset")
        return found
    earlier = registry.earlier(config.base_model)
    if not earlier:
        raise BuildError(f"no SFT dataset of {config.base_model} to take teacher contexts from",
                         why="pairs put the student's answers next to the teacher's, from a built dataset",
                         fix="build a dataset from your sessions first, or name one")
    return earlier[-1]


def check_adapter(adapter: str | None) -> str:
    """The adapter folder's sha256 (over every file), or '' for none; a clear error when it is not an adapter."""
    if not adapter:
        return ""
    folder = Path(adapter).expanduser()
    if not (folder / "adapter_config.json").is_file():
        raise BuildError(f"{adapter} is not a LoRA adapter or checkpoint folder",
                         why="it has no adapter_config.json",
                         fix="choose a run's adapter folder or one of its checkpoint folders")
    return sha256_dir(folder)


def plan(store: Store, config: PairsConfig) -> Plan:
    """Resolve the source dataset (checked against its manifest), its teacher contexts and the dropped pairs."""
    registry = Registry(store)
    adapter_sha256 = check_adapter(config.adapter)
    source = _source(registry, config)
    folder = Path(source.path)
    if problems := manifest.verify(folder):
        raise BuildError(f"the source dataset {source.name} does not match its manifest",
                         why="; ".join(problems[:5]), fix="rebuild it, or choose another")
    heldout = registry.heldout(config.base_model) | registry.heldout(source.base_model)
    all_train = list(train_records(folder))
    usable = [r for r in all_train if r.get("session_id") not in heldout]
    p = Plan(config, source, manifest.read(folder), teacher_contexts(usable, config.max_contexts, config.seed),
             adapter_sha256, skipped_heldout=len(all_train) - len(usable))
    if config.include_dropped:
        p.dropped, p.dropped_files, p.dropped_skipped = dropped_pairs(store)
    if config.include_corrections:
        p.corrections = list(manifest.iter_pairs(folder))
    if not p.contexts and not p.dropped and not p.corrections:
        raise BuildError(f"the source dataset {source.name} has no teacher context in its train split",
                         fix="build a dataset with a train split, or choose another")
    return p


def _quiet(*_: Any) -> None:
    return None


def build(p: Plan, student: Student, out: Path, progress: Progress = _quiet, log: Log = _quiet) -> manifest.Manifest:
    """Ask the student at every context, keep the disagreements as pairs, add the dropped pairs, write train.jsonl,
    report.json and the manifest into `out`. Raises BuildError when there is no pair at all."""
    counts: Counter = Counter(contexts=len(p.contexts))
    outcomes: list[dict] = []
    pairs: dict[str, dict] = {}
    scrubber = Scrubber()
    for i, ctx in enumerate(p.contexts):
        raw, finished = student.generate(ctx.messages)
        before = scrubber.report.total
        answer = parse_student(scrubber.text(raw))
        counts["student output scrubbed"] += int(scrubber.report.total > before)
        counts["truncated"] += int(not finished)
        outcome = {"key": ctx.key, "session_id": ctx.session_id, "example_id": ctx.example_id, "turn": ctx.turn}
        if exact_agreement(ctx.teacher, answer):
            counts["agreed"] += 1
            outcome["result"] = "agreed"
        else:
            rec = pair_record(ctx.messages, ctx.teacher, answer, session_id=ctx.session_id,
                              example_id=ctx.example_id, turn=ctx.turn, truncated=not finished)
            outcome.update(_keep(rec, pairs, counts, scrubber))
        outcomes.append(outcome)
        progress("generate", i + 1, len(p.contexts))
    counts["student pairs"] = len(pairs)
    counts["correction pairs"] = merge(pairs, p.corrections, counts, scrubber)
    counts["dropped pairs"] = merge(pairs, p.dropped, counts, scrubber)
    counts["pairs"] = len(pairs)
    log(f"{counts['contexts']} contexts: the student agreed on {counts['agreed']}, {counts['student pairs']} pairs; "
        f"{counts['correction pairs']} pairs from corrections; {counts['dropped pairs']} pairs from "
        f"{len(p.dropped_files)} dropped file(s)")
    if not pairs:
        raise BuildError("no preference pairs", why=f"the student agreed with the teacher on {counts['agreed']} of "
                                                    f"{counts['contexts']} contexts, {counts['excluded']} excluded",
                         fix="use an earlier checkpoint, more contexts, or drop a preference file")
    return _write(p, student, out, list(pairs.values()), counts, outcomes, progress)


def merge(pairs: dict[str, dict], records: list[dict], counts: Counter, scrubber: Scrubber | None = None) -> int:
    """Add records (correction or dropped pairs) to the mined pairs, checked like them, once each by id; returns how
    many were added."""
    before, scrubber = len(pairs), scrubber or Scrubber()
    for rec in records:
        if rec["id"] not in pairs:
            _keep(rec, pairs, counts, scrubber)
    return len(pairs) - before


def _keep(rec: dict, pairs: dict[str, dict], counts: Counter, scrubber: Scrubber) -> dict:
    problem = checks.spec_problem(rec, SPEC_ID)
    problems = [problem] if problem else []
    if not problems and (secret := checks.secrets([*rec["prompt"], *rec["chosen"], *rec["rejected"]], scrubber)):
        problems.append(secret)
    if problems:
        counts["excluded"] += 1
        for pr in problems:
            counts[f"excluded: {pr.check}"] += 1
        return {"result": "excluded", "problems": [pr.as_dict() for pr in problems]}
    pairs.setdefault(rec["id"], rec)
    return {"result": "pair", "pair_id": rec["id"]}


def _write(p: Plan, student: Student, out: Path, records: list[dict], counts: Counter, outcomes: list[dict],
           progress: Progress) -> manifest.Manifest:
    out.mkdir(parents=True, exist_ok=True)
    order = {"student": 0, "correction": 1}
    records.sort(key=lambda r: (order.get(r["source"], 2), r["session_id"], r["turn"] or 0, r["id"]))
    manifest.write_jsonl(out / manifest.SPLIT_FILES["train"], records)
    progress("write", 1, 2)
    sessions = {r["session_id"] for r in records if r["session_id"]}
    size = manifest.SplitSize(examples=len(records), sessions=len(sessions))
    for r in records:
        prompt = student.count(r["prompt"])
        full = student.count(r["prompt"] + r["chosen"]) + student.count(r["prompt"] + r["rejected"])
        size.tokens += full
        size.trained_tokens += max(0, full - 2 * prompt)
    config = p.config.model_dump() | {"source": p.source.name}
    report = {"source": {"name": p.source.name, "fingerprint": p.source.fingerprint}, "contexts": counts["contexts"],
              "agreed": counts["agreed"], "pairs": counts["pairs"], "student_pairs": counts["student pairs"],
              "correction_pairs": counts["correction pairs"],
              "dropped_pairs": counts["dropped pairs"], "dropped_files_included": len(p.dropped_files),
              "dropped_files": p.dropped_files, "dropped_files_skipped": p.dropped_skipped,
              "excluded": counts["excluded"], "truncated": counts["truncated"],
              "heldout_examples_skipped": p.skipped_heldout, "counts": dict(counts), "outcomes": outcomes}
    (out / manifest.REPORT).write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
    per = Counter(r["session_id"] for r in records if r["source"] == "student")
    sha = {u.id: u.content_sha256 for u in p.source_manifest.sessions}
    sessions = sorted({c.session_id for c in p.contexts})
    man = manifest.Manifest(
        name=p.config.name or default_name("pairs"), kind="preference", spec_id=SPEC_ID,
        base_model=p.config.base_model, base_model_label=student.label, template_sha256=student.template_sha256,
        convention="hermes-text", mode="pairs", config=config,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        fingerprint=manifest.fingerprint({"train": [r["id"] for r in records]}, student.template_sha256),
        splits={"train": size},
        sessions=[manifest.SessionUse(id=sid, split="train", examples=per.get(sid, 0), content_sha256=sha.get(sid, ""))
                  for sid in sessions],
        counts=dict(counts),
        student={"base_model": p.config.base_model, "label": student.label, "adapter": p.config.adapter,
                 "adapter_sha256": p.adapter_sha256, "decoding": "greedy",
                 "max_new_tokens": p.config.max_new_tokens})
    manifest.write(out, man)
    progress("write", 2, 2)
    return man
