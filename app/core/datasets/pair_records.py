"""The preference_v1 record (`pair_record`): one shape, in conversational Hermes text, for the pairs the student's
answers make, for correction pairs and for the user's dropped preference files (`conversational`, `dropped_pairs`).

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

import json
from pathlib import Path
from typing import Any, Iterator

from sqlalchemy import select

from app.core.base.fingerprint import sha256_file
from app.core.base.schema import DatasetFile
from app.core.base.store import Store
from app.core.datafiles.formats import SPECS, record_problem
from app.core.datasets import manifest
from app.core.toolcalls.convention import as_text

SPEC_ID = "preference_v1"


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
