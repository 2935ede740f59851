"""Dataset files dropped on the app: read the file, vote on its spec (app.core.datafiles.formats), quick-check every record."""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.base import lines
from app.core.base.fingerprint import sha256_file
from app.core.datafiles.formats import (
    SPECS,
    DatasetSpec,
    accepted_formats,
    record_problem,
    spec_for,
    transcript_kind,
    type_name,
    unsupported_shape,
)

MAX_DOCUMENT_BYTES = 256 * 1024**2  # a bigger single JSON document is not loaded
MAX_UNDECODABLE = 0.05  # share of bytes in the head that may be invalid UTF-8 before the file counts as binary
VOTE_RECORDS = 20  # check_dataset: records that vote on the format
SNIFF_RECORDS = 5  # looks_like_dataset: records looked at
SHOWN_PROBLEMS = 3


@dataclass
class DatasetCheck:
    """The verdict on one dropped file. For a JSON array document each array item counts as a line."""
    path: Path
    spec: str | None = None
    accepted: bool = False
    reason: str = ""  # '' when accepted, else what was refused, why, and what to do
    lines: int = 0
    records: int = 0
    blank: int = 0
    problems: list[tuple[int, str]] = field(default_factory=list)  # (1-based line, reason)
    sha256: str = ""  # '' when the file was refused before it was read through
    layout: str = "jsonl"  # or "json-array"

    def summary(self) -> str:
        return (f"{self.lines} lines: {self.records} usable, {len(self.problems)} set aside, "
                f"{self.blank} blank")


# --- reading ----------------------------------------------------------------------------------------------------

def _array_head(text: str, limit: int) -> list[Any]:
    """The first items of a JSON array document, parsed from its (possibly cut) beginning."""
    decoder, items, pos = json.JSONDecoder(), [], text.index("[") + 1
    while len(items) < limit:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break
        items.append(item)
    return items


def _start(path: Path, size: int) -> str:
    with path.open("rb") as fh:
        return fh.read(size).decode("utf-8", errors="replace").lstrip("\ufeff").lstrip()


def _head(path: Path, limit: int) -> tuple[str, list[Any]]:
    """("json-array" | "jsonl", the first records parsed)."""
    if _start(path, 4096).startswith("["):
        return "json-array", _array_head(_start(path, lines.MAX_LINE_BYTES), limit)
    return "jsonl", lines.head(path, limit)


def looks_like_dataset(path: str | Path) -> bool:
    """A cheap sniff: do the first records match a dataset format (supported or not), rather than a transcript?"""
    try:
        records = [r for r in _head(Path(path), SNIFF_RECORDS)[1] if isinstance(r, dict)]
    except OSError:
        return False
    if not records or any(transcript_kind(r) for r in records):
        return False
    return any(spec_for(r) or unsupported_shape(r) for r in records)


# --- refusals ---------------------------------------------------------------------------------------------------

def _is_binary(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(lines.BINARY_SNIFF_BYTES)
    undecodable = len(head) - len(head.decode("utf-8", errors="ignore").encode("utf-8"))
    return b"\x00" in head or undecodable > MAX_UNDECODABLE * len(head)


def _file_refusal(path: Path, max_bytes: int) -> str | None:
    """Why the file is refused before its records are read, or None."""
    if not path.is_file():
        return f"{path} is not a file. Choose a .jsonl (or .json) dataset file."
    size = path.stat().st_size
    if size == 0:
        return f"{path.name} is empty: there are no records to train on. Choose a file with one record per line."
    if size > max_bytes:
        return (f"{path.name} is {size / 1024**3:.1f} GiB, over the {max_bytes / 1024**3:.1f} GiB limit. "
                "Split it into smaller files and add them one by one.")
    if _is_binary(path):
        return (f"{path.name} is a binary file, not UTF-8 JSON text. Choose a .jsonl file with one JSON record "
                "per line, saved as UTF-8.")
    return None


def _keys_seen(records: list[dict]) -> str:
    counts = Counter(k for r in records for k in r)
    return ", ".join(f"`{k}`" for k, _ in counts.most_common(8)) or "none"


def _transcript_reason(path: Path, kind: str) -> str:
    return (f"{path.name} is a {kind} session transcript, not a dataset. Add it as an agent transcript "
            "instead; dataset files hold training records.")


def _unknown_reason(path: Path, records: list[Any]) -> str:
    dicts = [r for r in records if isinstance(r, dict)]
    if kind := next((k for r in dicts if (k := transcript_kind(r))), None):
        return _transcript_reason(path, kind)
    if not dicts:
        return (f"{path.name} holds JSON values that are not objects (the first is a {type_name(records[0])}). "
                f"Each record must be a JSON object in one of the accepted formats: {accepted_formats()}.")
    shape = next((s for r in dicts if (s := unsupported_shape(r))), None)
    what = f"look like {shape}, which Nightschool cannot train on" if shape else "match no known dataset format"
    return (f"{path.name} was refused: its records {what} (keys seen: {_keys_seen(dicts)}). "
            f"Accepted formats: {accepted_formats()}. Convert the file to one of them and add it again.")


def _unparsed_reason(path: Path) -> str:
    doc = lines.loads(_start(path, MAX_DOCUMENT_BYTES)) if path.stat().st_size <= MAX_DOCUMENT_BYTES else lines.BAD
    if kind := transcript_kind(doc):
        return _transcript_reason(path, kind)
    if isinstance(doc, dict):
        return (f"{path.name} is one JSON document, not JSON Lines. Put one record per line (e.g. "
                "`jq -c . file.json > file.jsonl`), or drop a JSON array of records.")
    return (f"{path.name} is not JSON Lines: its first lines are not valid JSON. Choose a .jsonl file with one JSON "
            "record per line, or a .json array of records.")


def _vote(path: Path, head: list[Any]) -> tuple[DatasetSpec | None, str]:
    """The spec most of the first records belong to, or None and why the file is refused."""
    parsed = [r for r in head if r is not lines.BAD]
    if not parsed:
        return None, (_unparsed_reason(path) if head else
                      f"{path.name} is empty: it has no records. Choose a file with one record per line.")
    votes = Counter(s.name if (s := spec_for(r)) else None for r in parsed)
    best = max(SPECS, key=lambda name: votes[name])
    if not votes[best] or votes[None] > votes[best]:
        return None, _unknown_reason(path, parsed)
    return SPECS[best], ""


# --- checking a whole file --------------------------------------------------------------------------------------

def _take(check: DatasetCheck, spec: DatasetSpec, number: int, line: lines.Line) -> None:
    if line.data is None:
        check.problems.append((number, lines.too_long(line.size)))
        return
    text = lines.decode(line.data)
    if not text.strip():
        check.blank += 1
        return
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as exc:
        check.problems.append((number, f"not valid JSON ({exc.msg} at column {exc.colno})"))
        return
    _judge_record(check, spec, number, rec)


def _judge_record(check: DatasetCheck, spec: DatasetSpec, number: int, rec: Any) -> None:
    if problem := record_problem(spec, rec):
        check.problems.append((number, problem))
    else:
        check.records += 1


def _scan_jsonl(check: DatasetCheck, spec: DatasetSpec) -> None:
    digest = hashlib.sha256()
    with check.path.open("rb") as fh:
        for number, line in enumerate(lines.raw_lines(fh, digest), start=1):
            check.lines = number
            _take(check, spec, number, line)
    check.sha256 = digest.hexdigest()


def _verdict(check: DatasetCheck, spec: DatasetSpec) -> DatasetCheck:
    bad, name, unit = len(check.problems), check.path.name, "record" if check.layout == "json-array" else "line"
    shown = "; ".join(f"{unit} {n}: {why}" for n, why in check.problems[:SHOWN_PROBLEMS])
    fix = f"Fix the file (each record should look like {spec.example}) and add it again."
    if not check.records:
        return _refuse(check, f"{name} has no usable {spec.name} record ({check.summary()}). {shown}. {fix}")
    if bad > check.records:
        return _refuse(check, f"{name} was refused: {bad} of {bad + check.records} records fail the {spec.name} "
                              f"checks ({shown}). {fix}")
    check.accepted = True
    return check


def _refuse(check: DatasetCheck, reason: str) -> DatasetCheck:
    check.accepted, check.reason = False, reason
    return check


def _check_array(check: DatasetCheck) -> DatasetCheck:
    check.layout, size = "json-array", check.path.stat().st_size
    if size > MAX_DOCUMENT_BYTES:
        return _refuse(check, f"{check.path.name} is one {size / 1024**2:.0f} MiB JSON document, too big to load "
                              "at once. Convert it to JSON Lines (`jq -c '.[]' file.json > file.jsonl`).")
    items = lines.loads(_start(check.path, size))
    if not isinstance(items, list):
        return _refuse(check, f"{check.path.name} is not a valid JSON array. Fix it, or convert it to JSON Lines "
                              "with one record per line.")
    spec, reason = _vote(check.path, items[:VOTE_RECORDS])
    if spec is None:
        return _refuse(check, reason)
    check.spec, check.lines, check.sha256 = spec.name, len(items), sha256_file(check.path)
    for number, rec in enumerate(items, start=1):
        _judge_record(check, spec, number, rec)
    return _verdict(check, spec)


def check_dataset(path: str | Path, max_bytes: int = lines.MAX_FILE_BYTES) -> DatasetCheck:
    """Detect a dropped file's format by majority over its first records, then quick-check every record."""
    check = DatasetCheck(Path(path))
    try:
        if reason := _file_refusal(check.path, max_bytes):
            return _refuse(check, reason)
        layout, head = _head(check.path, VOTE_RECORDS)
        if layout == "json-array":
            return _check_array(check)
        spec, reason = _vote(check.path, head)
        if spec is None:
            return _refuse(check, reason)
        check.spec = spec.name
        _scan_jsonl(check, spec)
    except OSError as exc:
        return _refuse(check, f"{check.path.name} could not be read ({exc.strerror or exc}). Check the file "
                              "exists and is readable, then add it again.")
    return _verdict(check, spec)
