"""Shared helpers for capture tests: where the real-world fixtures live (../shared beside the checkout), upstream
expected values, and writing hand-made JSONL fixtures."""
from __future__ import annotations

import itertools
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


# --- Claude Code record builders -----------------------------------------------------------------
SID = "11111111-2222-3333-4444-555555555555"
_clock = itertools.count()


def user(uuid, parent, content, **extra) -> dict:
    return {"type": "user", "uuid": uuid, "parentUuid": parent, "sessionId": SID, "cwd": "/home/me/proj",
            "gitBranch": "dev", "version": "2.1.0", "timestamp": f"2025-03-01T10:{next(_clock) % 60:02d}:00.000Z",
            "message": {"role": "user", "content": content}, **extra}


def assistant(uuid, parent, blocks, msg_id=None, usage=None, **extra) -> dict:
    message = {"id": msg_id or f"msg_{uuid}", "role": "assistant", "model": "claude-opus-4-5", "content": blocks}
    record = user(uuid, parent, None, requestId=f"req_{msg_id or uuid}", **extra)
    return {**record, "type": "assistant", "message": {**message, **({"usage": usage} if usage else {})}}


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def call(call_id: str, name: str, **args) -> dict:
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


def result(call_id: str, content, is_error: bool = False) -> dict:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error}
