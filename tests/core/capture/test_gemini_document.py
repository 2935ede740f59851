"""An older Gemini CLI recording (one pretty-printed JSON document) is read whole at once, by msgspec from its bytes,
never line by line first: every real Gemini fixture gives the session json.loads' values give; invalid UTF-8, a BOM,
NaN and huge numbers read as json.loads reads them; what is not one JSON object is read as JSONL, its problems
reported by line as before."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from app.core.base import lines
from app.core.capture.detect import detect_format
from app.core.capture.parsers import gemini
from tests.core.capture.helpers import REAL

REAL2 = REAL.parent / "real-world-2"
META = {"sessionId": "g-doc", "projectHash": "f00d", "startTime": "2025-06-01T10:00:00Z"}


def _gemini_fixtures() -> list[Path]:
    return [p for base in (REAL, REAL2) for p in sorted(base.rglob("*.json*")) if detect_format(p) == "gemini"]


def _text_only(monkeypatch):
    """The document decoded as it was before: its text (U+FFFD for invalid UTF-8) by json.loads."""
    def refuse(_raw: bytes):
        raise ValueError("read from the text")

    monkeypatch.setattr(gemini, "document_value", refuse)
    monkeypatch.setattr(gemini, "loads", json.loads)


def _no_lines(*_a, **_kw):
    raise AssertionError("a document was read line by line")


@pytest.mark.skipif(not REAL2.is_dir(), reason=f"shared fixtures not here ({REAL2})")
def test_every_real_gemini_fixture_parses_the_same_from_bytes_as_from_text(monkeypatch):
    files = _gemini_fixtures()
    documents = [f for f in files if lines.head(f, 1)[0] is lines.BAD]
    assert len(files) >= 6 and len(documents) >= 4  # both formats, real ones
    fast = {}
    with monkeypatch.context() as m:
        m.setattr(gemini, "read_jsonl", _no_lines)  # the documents are never read line by line
        fast.update({f: dataclasses.asdict(gemini.parse_gemini(f, final=True)) for f in documents})
    fast.update({f: dataclasses.asdict(gemini.parse_gemini(f, final=True)) for f in files if f not in documents})
    _text_only(monkeypatch)
    for f in files:
        assert fast[f] == dataclasses.asdict(gemini.parse_gemini(f, final=True)), f
    assert sum(len(fast[f]["messages"]) for f in documents) > 50 and not any(fast[f]["problems"] for f in documents)


def _document(path: Path, messages: list, raw_text: bytes = b"") -> Path:
    body = json.dumps({**META, "messages": messages}, indent=2).encode()
    path.write_bytes(raw_text + body if raw_text else body)
    return path


def test_a_document_reads_as_json_loads_would(tmp_path, monkeypatch):
    messages = [{"id": "u1", "timestamp": "2025-06-01T10:00:01Z", "type": "user", "content": "hi"},
                {"id": "g1", "timestamp": "2025-06-01T10:00:02Z", "type": "gemini", "content": "ok",
                 "tokens": {"input": 12345678901234567890123, "output": 7}}]
    plain = _document(tmp_path / "plain.json", messages)
    bom = _document(tmp_path / "bom.json", messages, raw_text="\ufeff".encode())
    odd = tmp_path / "odd.json"
    odd.write_bytes(plain.read_bytes().replace(b'"hi"', b'"h\xff"').replace(b"7\n", b"NaN\n")
                    .replace(b'"f00d"', b"1e400"))
    got = {p.name: dataclasses.asdict(gemini.parse_gemini(p, final=True)) for p in (plain, bom, odd)}
    assert [m["parts"][0]["text"] for m in got["plain.json"]["messages"]] == ["hi", "ok"]
    assert got["bom.json"]["messages"] == got["plain.json"]["messages"]
    assert got["odd.json"]["messages"][0]["parts"][0]["text"] == "h\ufffd" and not got["odd.json"]["problems"]
    big = 12345678901234567890123
    assert got["plain.json"]["messages"][1]["usage"] == {"input_tokens": big, "output_tokens": 7}  # a huge int kept
    assert got["odd.json"]["messages"][1]["usage"] == {"input_tokens": big}  # NaN read, not an int: not counted
    _text_only(monkeypatch)
    assert {p.name: dataclasses.asdict(gemini.parse_gemini(p, final=True)) for p in (plain, bom, odd)} == got


def test_what_is_not_one_json_object_is_read_as_lines(tmp_path):
    listed = tmp_path / "listed.json"
    listed.write_text(json.dumps([META, {"id": "u1", "type": "user", "content": "hi"}], indent=2))
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps({**META, "messages": []}, indent=2)[:-3])  # half-written
    jsonl = tmp_path / "late.jsonl"  # a bad first line, then records: JSONL with a problem
    jsonl.write_text("{not json\n" + json.dumps(META) + "\n" + json.dumps({"id": "u1", "type": "user",
                                                                          "content": "hi"}) + "\n")
    for path in (listed, cut):
        s = gemini.parse_gemini(path, final=True)
        assert not s.messages and s.lines == len(path.read_text().splitlines()) and s.problems
    s = gemini.parse_gemini(jsonl, final=True)
    assert [m.text for m in s.messages] == ["hi"] and [line for line, _ in s.problems] == [1]
    assert s.session_id == "g-doc"
