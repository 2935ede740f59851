"""Format detection: every real fixture by its MANIFEST format, unknown formats (pi agent) refused, edge cases."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.capture.detect import detect_format

from tests.core.capture.helpers import REAL  # noqa: E402
READABLE = {"claude-code", "codex", "gemini"}


def manifest() -> list[tuple[str, str]]:
    rows = (line.split("\t") for line in (REAL / "MANIFEST.tsv").read_text().splitlines()[1:] if line.strip())
    return [(row[0], row[6]) for row in rows]


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def jsonl(*records: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


@pytest.mark.parametrize("local_path, fmt", manifest())
def test_every_real_fixture_is_recognised_or_refused(local_path, fmt):
    assert detect_format(REAL / local_path) == (fmt if fmt in READABLE else None)


def test_the_fixtures_cover_all_three_formats_and_the_pi_agent():
    formats = {fmt for _, fmt in manifest()}
    assert READABLE <= formats
    pi = REAL / "simonw+claude-code-transcripts" / "tests" / "sample_pi_session.jsonl"
    assert pi.exists() and detect_format(pi) is None  # a format we cannot read: callers refuse it


def test_claude_code_starting_with_summary_or_snapshot_lines(tmp_path):
    summary = {"type": "summary", "summary": "Refactor", "leafUuid": "u9"}
    snapshot = {"type": "file-history-snapshot", "messageId": "m1", "snapshot": {}}
    assert detect_format(write(tmp_path / "a.jsonl", jsonl(summary))) == "claude-code"
    assert detect_format(write(tmp_path / "b.jsonl", jsonl(snapshot))) == "claude-code"


def test_gemini_jsonl_whose_records_carry_a_session_id_too(tmp_path):
    meta = {"sessionId": "s", "projectHash": "h", "startTime": "2025-06-01T10:00:00Z"}
    record = {"id": "m1", "type": "user", "content": "hi", "sessionId": "s"}  # not Claude: no uuid, no message
    assert detect_format(write(tmp_path / "a.jsonl", jsonl(meta, record))) == "gemini"
    assert detect_format(write(tmp_path / "b.jsonl", jsonl(record, {"$rewindTo": "m1"}))) == "gemini"


def test_codex_with_and_without_the_envelope_bom_and_crlf(tmp_path):
    item = {"timestamp": "t", "type": "response_item", "payload": {"type": "message", "role": "user", "content": []}}
    crlf = b"\xef\xbb\xbf" + json.dumps(item).encode() + b"\r\n"
    assert detect_format(write(tmp_path / "a.jsonl", crlf)) == "codex"
    older = jsonl({"id": "x", "timestamp": "t", "instructions": ""}, {"record_type": "state"},
                  {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]})
    assert detect_format(write(tmp_path / "b.jsonl", older)) == "codex"


@pytest.mark.parametrize("text", [
    "",
    "\n\n",
    "not json at all\n",
    "[1, 2, 3]\n",
    jsonl({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
    json.dumps({"messages": [{"role": "user", "content": "hi"}]}, indent=2),
    jsonl({"conversations": [{"from": "human", "value": "hi"}]}),
    jsonl({"instruction": "x", "input": "", "output": "y"}),
    jsonl({"type": "message", "message": {"role": "user", "content": "pi-like"}}),
])
def test_other_files_are_refused(tmp_path, text):
    assert detect_format(write(tmp_path / "f.jsonl", text)) is None


def test_a_missing_file_or_a_directory_is_refused(tmp_path):
    assert detect_format(tmp_path / "absent.jsonl") is None
    assert detect_format(tmp_path) is None


def test_pretty_printed_gemini_document(tmp_path):
    doc = {"sessionId": "s", "projectHash": "h", "messages": [{"id": "1", "type": "user", "content": "hi"}]}
    assert detect_format(write(tmp_path / "session.json", json.dumps(doc, indent=2))) == "gemini"


def test_claude_code_starting_with_queue_operations(tmp_path):
    queued = {"type": "queue-operation", "operation": "enqueue", "timestamp": "t", "sessionId": "s", "content": "x"}
    assert detect_format(write(tmp_path / "a.jsonl", jsonl(queued, queued))) == "claude-code"
