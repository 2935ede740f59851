"""Dropped dataset files: the four formats accepted, per-line problems, unknown schemas, transcripts and junk refused."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from app.core.datafiles.dropped import SPECS, DatasetCheck, check_dataset, looks_like_dataset


def write(path: Path, data: str | bytes) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def jsonl(*records: object) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def balanced(check: DatasetCheck) -> bool:
    return check.lines == check.records + check.blank + len(check.problems)


CHAT = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                     {"role": "assistant", "content": "Hello."}]}
CHAT_TOOLS = {
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "List the files"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{\"path\": \".\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py"},
        {"role": "assistant", "content": "Two files: a.py and b.py."},
    ],
    "tools": [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}],
}
SHAREGPT = {"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"},
                              {"from": "gpt", "value": "Hello."}]}
SHAREGPT_ROLES = {"conversations": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
ALPACA = {"instruction": "Add 2 and 3.", "input": "", "output": "5"}
PREFERENCE = {"prompt": "Capital of France?", "chosen": "Paris.", "rejected": "Lyon."}
PREFERENCE_MSGS = {"prompt": [{"role": "user", "content": "Capital of France?"}],
                   "chosen": [{"role": "assistant", "content": "Paris."}],
                   "rejected": [{"role": "assistant", "content": "Lyon."}]}
CLAUDE_LINE = {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s1", "timestamp": "2025-01-01T00:00:00Z",
               "message": {"role": "user", "content": "fix the bug"}}
CODEX_LINE = {"timestamp": "2025-01-01T00:00:00Z", "type": "session_meta", "payload": {"id": "x", "cwd": "/tmp"}}
GEMINI_LINE = {"id": "m1", "type": "gemini", "content": "Done.", "timestamp": "2025-01-01T00:00:00Z"}


@pytest.mark.parametrize("spec, records", [
    ("chat_sft_v1", [CHAT, CHAT_TOOLS]),
    ("sharegpt_v1", [SHAREGPT, SHAREGPT_ROLES]),
    ("alpaca_v1", [ALPACA, {"instruction": "Say hi.", "output": "Hi!"}]),
    ("preference_v1", [PREFERENCE, PREFERENCE_MSGS]),
])
def test_each_format_is_detected_and_accepted(tmp_path, spec, records):
    path = write(tmp_path / "data.jsonl", jsonl(*records * 3))
    assert looks_like_dataset(path)
    check = check_dataset(path)
    assert (check.spec, check.accepted, check.reason) == (spec, True, "")
    assert (check.lines, check.records, check.blank, check.problems) == (6, 6, 0, [])
    assert check.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_registry_holds_exactly_the_four_formats():
    assert set(SPECS) == {"chat_sft_v1", "sharegpt_v1", "alpaca_v1", "preference_v1"}


def test_chat_with_tool_calls_is_checked(tmp_path):
    bad_args = json.loads(json.dumps(CHAT_TOOLS))
    bad_args["messages"][1]["tool_calls"][0]["function"]["arguments"] = "{not json"
    no_call_id = json.loads(json.dumps(CHAT_TOOLS))
    del no_call_id["messages"][2]["tool_call_id"]
    image = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
                          {"role": "assistant", "content": "A cat."}]}
    path = write(tmp_path / "tools.jsonl", jsonl(CHAT_TOOLS, CHAT_TOOLS, CHAT_TOOLS, bad_args, no_call_id, image))
    check = check_dataset(path)
    assert check.accepted and check.records == 3
    assert [line for line, _ in check.problems] == [4, 5, 6]
    reasons = [why for _, why in check.problems]
    assert "arguments` is not valid JSON" in reasons[0]
    assert "tool_call_id" in reasons[1]
    assert "image_url" in reasons[2]


def test_per_line_problems_have_line_numbers_and_counts_balance(tmp_path):
    lines = [
        json.dumps(CHAT),
        "",
        "{broken json",
        json.dumps({"messages": [{"role": "user", "content": "Hi"}]}),  # no assistant turn
        json.dumps(CHAT),
        "   ",
        json.dumps({"messages": [{"role": "robot", "content": "beep"}, {"role": "assistant", "content": "x"}]}),
        json.dumps(CHAT),
        json.dumps(ALPACA),  # another format inside a chat file
        json.dumps(CHAT),
        json.dumps(CHAT),
        json.dumps(CHAT),
    ]
    check = check_dataset(write(tmp_path / "mixed.jsonl", "\n".join(lines) + "\n"))
    assert check.accepted and check.spec == "chat_sft_v1"
    assert (check.lines, check.records, check.blank) == (12, 6, 2)
    assert [line for line, _ in check.problems] == [3, 4, 7, 9]
    assert "not valid JSON" in check.problems[0][1]
    assert "assistant" in check.problems[1][1]
    assert "robot" in check.problems[2][1]
    assert "messages" in check.problems[3][1]
    assert balanced(check)


@pytest.mark.parametrize("record, keys", [
    ({"text": "Once upon a time"}, ["`text`"]),
    ({"foo": 1, "bar": 2}, ["`foo`", "`bar`"]),
    ({"prompt": "2+2=", "completion": "4"}, ["`prompt`", "`completion`"]),
])
def test_unknown_schema_is_refused_naming_keys_and_formats(tmp_path, record, keys):
    check = check_dataset(write(tmp_path / "odd.jsonl", jsonl(record, record)))
    assert not check.accepted and check.spec is None
    assert all(key in check.reason for key in keys)
    assert all(name in check.reason for name in SPECS)
    assert balanced(check)


def test_known_unsupported_shape_still_looks_like_a_dataset(tmp_path):
    assert looks_like_dataset(write(tmp_path / "text.jsonl", jsonl({"text": "hello"})))
    assert not looks_like_dataset(write(tmp_path / "foo.jsonl", jsonl({"foo": 1})))


@pytest.mark.parametrize("record, agent", [
    (CLAUDE_LINE, "Claude Code"), (CODEX_LINE, "Codex CLI"), (GEMINI_LINE, "Gemini CLI"),
    ({"sessionId": "s", "projectHash": "h", "startTime": "t"}, "Gemini CLI"),
])
def test_transcripts_are_not_datasets(tmp_path, record, agent):
    path = write(tmp_path / "session.jsonl", jsonl(record, record))
    assert not looks_like_dataset(path)
    check = check_dataset(path)
    assert not check.accepted and agent in check.reason and "transcript" in check.reason


def test_claude_transcript_with_a_messages_line_is_still_a_transcript(tmp_path):
    path = write(tmp_path / "session.jsonl", jsonl(CLAUDE_LINE, {"type": "summary", "leafUuid": "u", "messages": []}))
    assert not looks_like_dataset(path)


def test_non_json_is_not_a_dataset(tmp_path):
    path = write(tmp_path / "notes.jsonl", "just some notes\nmore text\n")
    assert not looks_like_dataset(path)
    check = check_dataset(path)
    assert not check.accepted and "not valid JSON" in check.reason


@pytest.mark.parametrize("data", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 20, bytes(range(128, 256)) * 40])
def test_binary_file_is_refused(tmp_path, data):
    path = write(tmp_path / "blob.jsonl", data)
    assert not looks_like_dataset(path)
    check = check_dataset(path)
    assert not check.accepted and "binary" in check.reason


@pytest.mark.parametrize("data", ["", "\n\n  \n"])
def test_empty_file_is_refused(tmp_path, data):
    check = check_dataset(write(tmp_path / "empty.jsonl", data))
    assert not check.accepted and "empty" in check.reason and balanced(check)


def test_mostly_bad_file_is_refused_with_examples(tmp_path):
    bad = {"messages": [{"role": "user", "content": "Hi"}]}
    check = check_dataset(write(tmp_path / "bad.jsonl", jsonl(CHAT, CHAT, bad, bad, bad, "x")))
    assert check.spec == "chat_sft_v1" and not check.accepted
    assert (check.records, len(check.problems)) == (2, 4) and balanced(check)
    assert "4 of 6" in check.reason and "line 3" in check.reason and '"messages"' in check.reason


def test_no_usable_record_is_refused(tmp_path):
    check = check_dataset(write(tmp_path / "none.jsonl", jsonl({"instruction": "Say hi.", "output": ""})))
    assert check.spec == "alpaca_v1" and not check.accepted
    assert check.records == 0 and "`output` is empty" in check.reason


def test_json_array_document_is_accepted(tmp_path):
    path = write(tmp_path / "data.json", json.dumps([ALPACA, ALPACA, {"instruction": "x"}], indent=2))
    assert looks_like_dataset(path)
    check = check_dataset(path)
    assert check.accepted and check.spec == "alpaca_v1" and check.layout == "json-array"
    assert (check.lines, check.records, check.problems[0][0]) == (3, 2, 3)
    assert "`output`" in check.problems[0][1] and balanced(check)


def test_one_pretty_printed_object_is_refused_with_advice(tmp_path):
    check = check_dataset(write(tmp_path / "one.json", json.dumps(CHAT, indent=2)))
    assert not check.accepted and "one JSON document" in check.reason and "jq" in check.reason


def test_preference_with_chosen_equal_rejected_is_flagged(tmp_path):
    same = {"prompt": "Capital of France?", "chosen": "Paris.", "rejected": " Paris. "}
    same_msgs = {**PREFERENCE_MSGS, "rejected": PREFERENCE_MSGS["chosen"]}
    check = check_dataset(write(tmp_path / "pref.jsonl", jsonl(PREFERENCE, PREFERENCE, PREFERENCE, same, same_msgs)))
    assert check.accepted and check.records == 3
    assert [line for line, _ in check.problems] == [4, 5]
    assert all("the same" in why for _, why in check.problems)


def test_sharegpt_without_gpt_turn_and_bad_speaker_are_flagged(tmp_path):
    no_gpt = {"conversations": [{"from": "human", "value": "Hi"}]}
    bad_from = {"conversations": [{"from": "bot", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]}
    check = check_dataset(write(tmp_path / "sg.jsonl", jsonl(SHAREGPT, SHAREGPT, SHAREGPT, no_gpt, bad_from)))
    assert check.accepted and [line for line, _ in check.problems] == [4, 5]
    assert "gpt" in check.problems[0][1] and "'bot'" in check.problems[1][1]


def test_crlf_bom_bad_utf8_and_missing_final_newline(tmp_path):
    body = "\ufeff" + json.dumps(ALPACA) + "\r\n\r\n" + json.dumps(ALPACA)
    data = body.encode() + b"\r\n" + b'{"instruction": "caf\xe9", "output": "ok"}'  # latin-1 byte, last line no newline
    check = check_dataset(write(tmp_path / "win.jsonl", data))
    assert check.accepted and check.spec == "alpaca_v1"
    assert (check.lines, check.records, check.blank, check.problems) == (4, 3, 1, [])


def test_oversized_file_is_refused(tmp_path):
    check = check_dataset(write(tmp_path / "big.jsonl", jsonl(ALPACA) * 50), max_bytes=100)
    assert not check.accepted and "limit" in check.reason and "Split" in check.reason


def test_majority_vote_picks_the_format(tmp_path):
    check = check_dataset(write(tmp_path / "vote.jsonl", jsonl(ALPACA, CHAT, CHAT, CHAT)))
    assert check.spec == "chat_sft_v1" and check.accepted and check.problems[0][0] == 1


def test_missing_file_is_refused(tmp_path):
    check = check_dataset(tmp_path / "nope.jsonl")
    assert not check.accepted and "not a file" in check.reason
    assert not looks_like_dataset(tmp_path / "nope.jsonl")


def test_overlong_line_is_a_problem_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setattr("app.core.base.lines.MAX_LINE_BYTES", 80)
    long = {"instruction": "x" * 200, "output": "y"}
    path = write(tmp_path / "long.jsonl", jsonl(ALPACA, long, ALPACA).rstrip("\n"))
    check = check_dataset(path)
    assert check.accepted and check.problems == [(2, check.problems[0][1])] and "limit" in check.problems[0][1]
    assert (check.lines, check.records) == (3, 2)
    assert check.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
