"""Chat JSONL checks: bad lines are named and kept, wrong files are refused with the reason, counts balance."""
from __future__ import annotations

import json

import pytest

from app.core.datafiles.chatfile import DatasetError, check_chat_file, write_snapshot
from tests.conftest import write_jsonl
from tests.tiny_model import chat_records

GOOD = chat_records(1)[0]


def test_malformed_lines_are_named_set_aside_and_counted(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join([
        json.dumps(GOOD),
        "{not json",
        json.dumps({"messages": []}),
        "",
        json.dumps({"messages": [{"role": "wizard", "content": "x"}]}),
        json.dumps({"messages": [{"role": "user", "content": "only a question"}]}),
        json.dumps(GOOD),
    ]) + "\n")
    report = check_chat_file(path)
    assert len(report.records) == 2
    reasons = {p.line: p.reason for p in report.problems}
    assert set(reasons) == {2, 3, 5, 6}
    assert "not valid JSON" in reasons[2]
    assert "non-empty" in reasons[3]
    assert "wizard" in reasons[5]
    assert "no assistant" in reasons[6]
    assert report.lines == len(report.records) + len(report.problems) + report.blank

    snap, quarantine = tmp_path / "run" / "dataset.jsonl", tmp_path / "run" / "quarantine.jsonl"
    write_snapshot(report, snap, quarantine)
    assert len(snap.read_text().splitlines()) == 2
    kept = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert [k["line"] for k in kept] == [2, 3, 5, 6] and kept[0]["raw"] == "{not json"


def test_empty_file_is_refused(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(DatasetError, match="empty"):
        check_chat_file(path)


def test_wrong_schema_names_the_format(tmp_path):
    path = write_jsonl(tmp_path / "alpaca.jsonl", [{"instruction": "a", "input": "", "output": "b"}] * 3)
    with pytest.raises(DatasetError, match="Alpaca"):
        check_chat_file(path)


def test_binary_file_is_refused(tmp_path):
    path = tmp_path / "weights.jsonl"
    path.write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(DatasetError, match="binary"):
        check_chat_file(path)


def test_one_json_document_is_told_apart_from_jsonl(tmp_path):
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps([GOOD, GOOD], indent=2))
    with pytest.raises(DatasetError, match="one JSON document"):
        check_chat_file(path)


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(DatasetError, match="not a file"):
        check_chat_file(tmp_path / "nope.jsonl")


def test_tool_calls_without_content_are_accepted(tmp_path):
    rec = {"messages": [{"role": "user", "content": "list files"},
                        {"role": "assistant", "content": None,
                         "tool_calls": [{"type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
                        {"role": "tool", "content": "a.py"},
                        {"role": "assistant", "content": "There is a.py."}]}
    report = check_chat_file(write_jsonl(tmp_path / "tools.jsonl", [rec]))
    assert len(report.records) == 1 and not report.problems
