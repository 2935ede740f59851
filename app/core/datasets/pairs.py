"""Preference pairs (DPO / ORPO / KTO): for a teacher context from an SFT dataset's train split, the student's next
action (chosen = the teacher's recorded action, rejected = the student's) plus the user's dropped preference_v1
files, the source dataset's corrections (chosen = an accepted correction, rejected = the answer the served student
gave; its `pairs.jsonl`) and the blind test's trials where a person found the student's answer worse (chosen = the
agent's action, rejected = the student's answer). A context where the student already agrees with the teacher is not a pair. Pure Python:
generation is the engine's (`engine.workers.mine_pairs`), behind the `Student` protocol (a llama.cpp student can stand in
later).

Teacher contexts: `contexts`; the records' one shape (preference_v1) and the dropped files: `pair_records`.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal, Protocol

from pydantic import BaseModel, Field

from app.core.base.fingerprint import sha256_dir
from app.core.base.schema import BuiltDataset
from app.core.base.store import Store
from app.core.scrub.scrubber import Scrubber
from app.core.datasets import checks, manifest
from app.core.datasets.catalog import Registry, default_name
from app.core.datasets.contexts import Context, teacher_contexts, train_records
from app.core.datasets.errors import BuildError
from app.core.datasets.pair_records import BLIND, BLIND_JUDGES, SPEC_ID, BlindFound, blind_pairs, dropped_pairs, \
    pair_record
from app.core.datasets.pair_records import conversational  # noqa: F401 - importable from pairs, as before the split
from app.core.toolcalls.agreement import exact_agreement
from app.core.toolcalls.convention import parse_student

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
    # whose blind trials judged "student worse" join the pairs: a person's; the teacher's only when chosen; [] none
    blind_judges: list[Literal["person", "teacher"]] = list(BLIND_JUDGES)
    seed: int = 0


class Student(Protocol):
    """The model that answers: greedy, deterministic. `generate` returns (text, finished: stopped before the limit)."""

    label: str
    template_sha256: str

    def generate(self, messages: list[dict]) -> tuple[str, bool]: ...
    def count(self, messages: list[dict]) -> int: ...  # tokens of a rendered message list


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
    blind: BlindFound = field(default_factory=BlindFound)  # the blind test's pairs and evidence


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
    p.blind = blind_pairs(store, config.base_model, config.blind_judges)
    if not p.contexts and not p.dropped and not p.corrections and not p.blind.records:
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
    counts["blind test pairs"] = merge(pairs, p.blind.records, counts, scrubber)
    counts["dropped pairs"] = merge(pairs, p.dropped, counts, scrubber)
    counts["pairs"] = len(pairs)
    log(f"{counts['contexts']} contexts: the student agreed on {counts['agreed']}, {counts['student pairs']} pairs; "
        f"{counts['correction pairs']} pairs from corrections; {counts['blind test pairs']} from the blind test; "
        f"{counts['dropped pairs']} pairs from {len(p.dropped_files)} dropped file(s)")
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
    order = {"student": 0, "correction": 1, BLIND: 2}
    records.sort(key=lambda r: (order.get(r["source"], 3), r["session_id"], r["turn"] or 0, r["id"]))
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
    (out / manifest.REPORT).write_text(json.dumps(_report(p, counts, outcomes, records), indent=1,
                                                  ensure_ascii=False),
                                       encoding="utf-8")
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


def _report(p: Plan, counts: Counter, outcomes: list[dict], records: list[dict]) -> dict:
    """report.json: where the contexts came from, what the student did at each, where the pairs came from (the pairs
    kept by source; the blind test's evidence and the held-out sessions its pairs come from)."""
    kept = [r for r in records if r["source"] == BLIND]
    blind = {"pairs": len(kept), "trials": sorted(r["blind_trial_id"] for r in kept),
             "judges": sorted({r["judge"] for r in kept}), "sessions": sorted({r["session_id"] for r in kept}),
             "evidence": {k: p.blind.evidence.get(k, 0) for k in ("worse", "better", "same", "agreed")}}
    return {"source": {"name": p.source.name, "fingerprint": p.source.fingerprint}, "contexts": counts["contexts"],
            "agreed": counts["agreed"], "pairs": counts["pairs"], "student_pairs": counts["student pairs"],
            "correction_pairs": counts["correction pairs"], "blind_pairs": counts["blind test pairs"],
            "by_source": dict(Counter(r["source"] for r in records)), "blind_test": blind,
            "dropped_pairs": counts["dropped pairs"], "dropped_files_included": len(p.dropped_files),
            "dropped_files": p.dropped_files, "dropped_files_skipped": p.dropped_skipped,
            "excluded": counts["excluded"], "truncated": counts["truncated"],
            "heldout_examples_skipped": p.skipped_heldout, "counts": dict(counts), "outcomes": outcomes}
