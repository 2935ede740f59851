"""A built dataset's manifest: content fingerprint, sources (the corrections apart), filters and counts, spec, base
model, template hash, split sizes and every file's sha256. Written last; a dataset whose files no longer match it is
refused."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, Field

from app.core.base.files import atomic_write
from app.core.base.fingerprint import sha256_file

MANIFEST = "manifest.json"
REPORT = "report.json"
SPLIT_FILES = {"train": "train.jsonl", "val": "val.jsonl", "test": "test.jsonl"}
PREVIEW = "preview.jsonl"
PAIRS = "pairs.jsonl"  # an SFT dataset's corrections as preference pairs (the pairs worker adds them to its own)


class SplitSize(BaseModel):
    examples: int = 0
    sessions: int = 0
    tokens: int = 0
    trained_tokens: int = 0


class SessionUse(BaseModel):
    id: str
    split: str
    examples: int
    content_sha256: str


class CorrectionUse(BaseModel):
    """An accepted correction a dataset trains on: its provenance, its SFT example and its preference pair."""

    correction_id: int
    experience_id: str
    teacher_model: str = ""
    source: str = "teacher"  # teacher | client
    created_at: str = ""
    cost: float = 0.0
    example_id: str = ""
    pair_id: str = ""


class Manifest(BaseModel):
    format: int = 1
    name: str
    kind: str = "sft"  # sft | preference
    spec_id: str = "chat_sft_v1"
    base_model: str
    base_model_label: str = ""
    template_sha256: str
    convention: str = "hermes-text"  # hermes-text | native-tools
    mode: str = "full"
    config: dict[str, Any] = Field(default_factory=dict)
    created_at: str
    fingerprint: str
    files: dict[str, str] = Field(default_factory=dict)  # file name -> sha256
    splits: dict[str, SplitSize] = Field(default_factory=dict)
    sessions: list[SessionUse] = Field(default_factory=list)
    corrections: list[CorrectionUse] = Field(default_factory=list)  # the student's own work, re-done and accepted
    filters: dict[str, int] = Field(default_factory=dict)  # filter -> sessions (or examples) it removed
    counts: dict[str, int] = Field(default_factory=dict)
    replayed_from: list[str] = Field(default_factory=list)
    # sessions this build added to its base model's held-out set (new sessions only; held out for ever)
    heldout_added: list[str] = Field(default_factory=list,
                                     validation_alias=AliasChoices("heldout_added", "heldout_frozen"))
    heldout_sessions: int = 0  # sessions in the held-out set after this build (its test split holds them all)
    heldout_from: dict[str, int] = Field(default_factory=dict)  # earlier dataset -> held-out examples read back
    student: dict[str, Any] = Field(default_factory=dict)  # preference pairs: the model that answered

    @property
    def examples(self) -> int:
        return sum(s.examples for s in self.splits.values())

    @property
    def heldout_frozen(self) -> list[str]:
        """The older name of `heldout_added`."""
        return self.heldout_added


def fingerprint(ids_by_split: dict[str, list[str]], template_sha256: str) -> str:
    """Content fingerprint: the template and the sorted example ids of each split (order of building is irrelevant)."""
    h = hashlib.sha256(template_sha256.encode())
    for split in sorted(ids_by_split):
        for example_id in sorted(ids_by_split[split]):
            h.update(f"\n{split}\t{example_id}".encode())
    return h.hexdigest()


def example_id(messages: list[dict], extra: str = "") -> str:
    blob = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + extra
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def write_jsonl(path: Path, records: list[dict]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


def write(folder: Path, manifest: Manifest) -> str:
    """Hash the folder's files into the manifest and write it atomically; return the manifest's sha256."""
    manifest.files = {p.name: sha256_file(p) for p in sorted(folder.iterdir())
                      if p.is_file() and p.name != MANIFEST and not p.name.endswith(".tmp")}
    atomic_write(folder / MANIFEST, manifest.model_dump_json(indent=2))
    return sha256_file(folder / MANIFEST)


def read(folder: Path) -> Manifest:
    return Manifest.model_validate_json((Path(folder) / MANIFEST).read_text(encoding="utf-8"))


def verify(folder: Path) -> list[str]:
    """Problems with a dataset folder against its manifest (missing, extra or changed files); [] when intact."""
    folder = Path(folder)
    try:
        manifest = read(folder)
    except (OSError, ValueError) as exc:
        return [f"the manifest cannot be read: {exc}"]
    problems = []
    present = {p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST}
    for name, digest in manifest.files.items():
        if name not in present:
            problems.append(f"{name} is missing")
        elif sha256_file(folder / name) != digest:
            problems.append(f"{name} changed after the build (sha256 differs)")
    problems += [f"{name} is not in the manifest" for name in sorted(present - set(manifest.files))]
    if any(c.pair_id for c in manifest.corrections) and PAIRS not in manifest.files:
        problems.append(f"{PAIRS} is not in the manifest, yet it lists the corrections' preference pairs")
    return problems


def iter_examples(folder: Path, split: str):
    yield from iter_records(Path(folder) / SPLIT_FILES[split])


def iter_pairs(folder: Path):
    """The corrections' preference pairs of an SFT dataset (none when it has no pairs file)."""
    yield from iter_records(Path(folder) / PAIRS)


def iter_records(path: Path):
    if not path.is_file():
        return
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)
