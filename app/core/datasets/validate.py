"""Validating a built dataset folder or a dataset file: integrity against the manifest, the spec registry (deny by
default), STANDARD content checks, split overlap and the held-out set. Each problem: {example, check, detail}."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from app.core.scrub.scrubber import Scrubber
from app.core.datafiles.dropped import check_dataset
from app.core.datasets import checks, manifest
from app.core.datasets.splits import SPLITS


def _problem(example: str, check: str, detail: str) -> dict:
    return {"example": example, "check": check, "detail": detail}


def records_of(folder: Path) -> Iterator[tuple[str, dict]]:
    for split in SPLITS:
        for rec in manifest.iter_examples(folder, split):
            yield split, rec


def _standard(example: str, rec: dict, spec_id: str, scrubber: Scrubber) -> list[dict]:
    if spec_id == "chat_sft_v1":
        return [_problem(example, p.check, p.detail) for p in checks.standard(rec, scrubber)]
    spec_problem = checks.spec_problem(rec, spec_id)
    return [_problem(example, spec_problem.check, spec_problem.detail)] if spec_problem else []


def validate_folder(folder: Path, heldout: frozenset[str] = frozenset()) -> tuple[int, list[dict]]:
    """(examples checked, problems) for a built dataset."""
    folder = Path(folder)
    problems = [_problem("", "integrity", p) for p in manifest.verify(folder)]
    try:
        man = manifest.read(folder)
    except (OSError, ValueError):
        return 0, problems
    scrubber, seen, ids, checked = Scrubber(), {}, {s: [] for s in SPLITS}, 0
    for split, rec in records_of(folder):
        checked += 1
        ids[split].append(rec.get("id", ""))
        problems += _standard(rec.get("id", "?"), rec, man.spec_id, scrubber)
        sid = rec.get("session_id")
        if sid and seen.setdefault(sid, split) != split:
            problems.append(_problem(rec.get("id", "?"), "overlap", f"session {sid} is in {seen[sid]} and {split}"))
        if sid in heldout and split != "test":
            problems.append(_problem(rec.get("id", "?"), "heldout", f"held-out session {sid} is in {split}"))
    if man.kind == "sft" and manifest.fingerprint(ids, man.template_sha256) != man.fingerprint:
        problems.append(_problem("", "integrity", "the examples do not add up to the manifest's fingerprint"))
    return checked, problems


def validate_file(path: Path) -> tuple[int, list[dict]]:
    """(records checked, problems) for a dataset file: its format must be a known spec, then every record's content."""
    found = check_dataset(path)
    if not found.accepted or not found.spec:
        return 0, [_problem("", "spec", found.reason or "not a dataset in a known format")]
    if found.layout != "jsonl":  # a JSON array document: the importer's per-record checks are what we have
        return found.records, [_problem(f"item {n}", "spec", why) for n, why in found.problems]
    scrubber, problems, checked = Scrubber(), [], 0
    with Path(path).open(encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            checked += 1
            try:
                rec = json.loads(line)
            except ValueError as exc:
                problems.append(_problem(f"line {number}", "spec", f"not valid JSON: {exc}"))
                continue
            problems += _standard(f"line {number}", rec, found.spec, scrubber)
    return checked, problems
