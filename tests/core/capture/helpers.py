"""Shared helpers for capture tests: where the real-world fixtures live (../shared beside the checkout), upstream
expected values, and writing hand-made JSONL fixtures."""
from __future__ import annotations

import json
import os
from pathlib import Path

REAL = Path(os.environ.get("NIGHTSCHOOL_SHARED", Path(__file__).resolve().parents[4] / "shared")) / "fixtures" / \
    "real-world"
KV = REAL / "kvsankar+agent-history" / "tests" / "fixtures"
SIMONW = REAL / "simonw+claude-code-transcripts" / "tests"
DAAAIN = REAL / "daaain+claude-code-log" / "test" / "test_data"


def expected(name: str, *keys: str) -> dict:
    """Upstream's expected values (kvsankar fixtures), narrowed by keys."""
    data = json.loads((KV / name).read_text())
    for key in keys:
        data = data[key]
    return data


def write(path: Path, *records, raw: bytes = b"") -> Path:
    """A JSONL file of records (dicts are dumped, strings written as they are), then raw bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_bytes("".join(line + "\n" for line in lines).encode() + raw)
    return path
