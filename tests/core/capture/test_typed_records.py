"""Typed decoding (parsers/records: msgspec Structs holding only the fields a parser reads) gives the sessions the
plain values gave: every real fixture, and hand-made lines that do not fit the types (they fall back to orjson), parsed
both ways; a JSON text read by lines.loads (msgspec first) is json.loads' value."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from app.core.base import lines
from app.core.capture import agents
from app.core.capture.detect import detect_format
from app.core.capture.parsers import claude, codex, records
from tests.core.capture.helpers import REAL, write

REAL2 = REAL.parent / "real-world-2"


def _refuse(_body: bytes):
    raise ValueError("every line read as plain values")


def _both(monkeypatch, parse, path: Path) -> tuple[dict, dict]:
    typed = dataclasses.asdict(parse(path, final=True))
    with monkeypatch.context() as m:
        m.setattr(claude, "claude_line", _refuse)
        m.setattr(codex, "codex_line", _refuse)
        plain = dataclasses.asdict(parse(path, final=True))
    return typed, plain


@pytest.mark.skipif(not REAL2.is_dir(), reason=f"shared fixtures not here ({REAL2})")
def test_every_real_fixture_parses_to_the_same_session_typed_or_plain(monkeypatch):
    seen = {}
    for base in (REAL, REAL2):
        for path in sorted(base.rglob("*.json*")):
            agent = detect_format(path)
            if agent in agents.AGENTS and agent != "gemini":  # Gemini's records stay plain values
                typed, plain = _both(monkeypatch, agents.load(agents.AGENTS[agent].parser), path)
                assert typed == plain, path
                seen[agent] = seen.get(agent, 0) + len(typed["messages"])
    assert seen["claude-code"] > 1000 and seen["codex"] > 1000


CLAUDE_ODD = [
    {"type": "user", "uuid": "u1", "sessionId": "s", "message": {"role": "user", "content": "hi"}, "isMeta": None},
    {"type": "user", "uuid": "u2", "parentUuid": "u1", "message": "a string, not an object"},
    {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "requestId": 3,
     "message": {"id": "m1", "model": 7, "usage": {"input_tokens": 5, "output_tokens": True, "cache": {"x": 1}},
                 "content": ["a bare string block", {"type": "text", "text": None},
                             {"type": "tool_use", "id": "t1", "name": "Task", "input": {"prompt": "go", "n": 2**70}},
                             {"type": 5}, {"type": "image", "source": {"media_type": "image/png", "data": "AAAA"}}]}},
    {"type": "user", "uuid": "r1", "parentUuid": "a1", "toolUseResult": {"agentId": "ag1", "big": [1, 2, {"x": "y"}]},
     "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": 1,
                                              "content": [{"type": "text", "text": "done"}, {"type": "image"},
                                                          "stray", {"type": "odd"}]}]}},
    {"type": "user", "uuid": "r2", "parentUuid": "r1", "toolUseResult": "Error: a string result",
     "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": {"a": 1}}]}},
    {"type": "progress", "uuid": "p1", "parentUuid": "r2", "parentToolUseID": "t1", "data": {"agentId": "ag2"}},
    {"type": "progress", "uuid": "p2", "parentUuid": "p1", "parentToolUseID": "", "data": ["not", "an", "object"]},
    {"type": "summary", "summary": "x", "leafUuid": "r2", "message": {"content": [{"type": "text", "text": "sum"}]}},
    {"type": "system", "subtype": "compact_boundary", "uuid": "c1", "logicalParentUuid": "r2", "isSidechain": "no"},
    [1, 2], "just a string", {"type": ""}, {"message": {}},
]
CODEX_ODD = [
    {"id": "0199e4a5-0000-7000-8000-000000000001", "timestamp": "2025-10-01T00:00:00Z", "instructions": "bare meta"},
    {"timestamp": "2025-10-01T00:00:01Z", "type": "turn_context", "payload": {"model": "gpt-5", "cwd": "/w/p"}},
    {"timestamp": 5, "type": "response_item", "payload": {"type": "message", "role": "user", "id": None,
                                                         "content": [{"type": "input_text", "text": "do it"}]}},
    {"type": "response_item", "payload": "a string payload"},
    {"type": "response_item", "payload": None},
    {"type": "event_msg", "payload": {"type": "agent_message", "message": None, "text": "kept?"}},
    {"type": "event_msg", "payload": {"type": "agent_message", "text": "from text"}},
    {"type": "response_item", "payload": {"type": "function_call", "name": "shell", "call_id": "c1",
                                          "arguments": '{"cmd": ["ls"], "n": 123456789012345678901234567890}'}},
    {"type": "response_item", "payload": {"type": "function_call", "name": "shell", "id": "c2", "arguments": "{NaN"}},
    {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c1",
                                          "output": '{"output": "x", "metadata": {"exit_code": 1}}'}},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a bare item"}]},
    {"record_type": "state"}, {"type": None, "record_type": 3},
    {"type": "event_msg", "payload": {"type": "token_count", "info": {"total_token_usage": {"input_tokens": 9}}}},
    {"type": "compacted", "payload": {"message": "summary text"}},
]


@pytest.mark.parametrize("kind", ["claude", "codex"])
def test_lines_that_do_not_fit_the_types_read_as_their_plain_values(tmp_path, monkeypatch, kind):
    """Nesting of another kind, nulls, numbers where text is read, a field's absence against its null, invalid UTF-8
    in a field read and in one not read: typed or plain, the same session."""
    rows = CLAUDE_ODD if kind == "claude" else CODEX_ODD
    raw = (b'{"type":"user","uuid":"u9","message":{"role":"user","content":"bad \xff byte"}}\n'
           b'{"type":"user","uuid":"u8","junk":"\xfe","message":{"role":"user","content":"unread bad byte"}}\n'
           b'{"type":"event_msg","payload":{"type":"agent_message","message":"bad \xff"}}\n')
    path = write(tmp_path / ("s.jsonl" if kind == "claude" else "rollout-x.jsonl"), *rows, raw=raw)
    parse = claude.parse_claude_with_subagents if kind == "claude" else codex.parse_codex
    typed, plain = _both(monkeypatch, parse, path)
    assert typed == plain
    assert typed["messages"] and typed["lines"] == len(rows) + 3


def test_a_line_that_fits_skips_what_no_parser_reads():
    line = json.dumps({"type": "user", "uuid": "u", "toolUseResult": {"agentId": "a", "file": "x" * 1000},
                       "snapshot": {"big": list(range(100))}, "message": {"content": "hi"}}).encode()
    rec = records.claude_line(line)
    assert isinstance(rec, records.ClaudeRecord) and rec.message.content == "hi"
    assert records.look(rec.toolUseResult, "agentId") == "a" and records.look(rec.data, "agentId") is None
    with pytest.raises(ValueError):
        records.claude_line(b'{"type": "user", "message": "text"}')  # read by orjson, then claude_record


@pytest.mark.parametrize("text", ['{"a": [1, 2.50, -0.0, 1E5, 123456789012345678901234567890]}', '"\\ud800"', "NaN",
                                  "1e400", '"a\\u0000b"', "[1,]", '"\x01"', " true ", "", "[" * 5000 + "]" * 5000])
def test_lines_loads_is_json_loads(text):
    try:
        want = json.loads(text)
    except (ValueError, RecursionError):
        want = lines.BAD
    got = lines.loads(text)
    assert repr(got) == repr(want) and type(got) is type(want)
