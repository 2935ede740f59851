"""Claude Code transcripts: real upstream fixtures and hand-written edge cases read into the session model."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from app.core.capture.parsers.claude import parse_claude, parse_claude_with_subagents
from app.core.capture.session import Session

from tests.core.capture.helpers import REAL, SID, assistant, call, result, text, user  # noqa: E402,F401
KV = REAL / "kvsankar+agent-history" / "tests" / "fixtures"
DAAAIN = REAL / "daaain+claude-code-log" / "test" / "test_data"
SIMONW = REAL / "simonw+claude-code-transcripts" / "tests"
def balanced(s: Session) -> bool:
    line_skips = sum(n for key, n in s.skipped.items() if not key.startswith("block:"))
    return s.lines == s.used + line_skips + len(s.problems) + s.blank


def roles(messages) -> list[str]:
    return [m.role for m in messages]


def write(path: Path, records: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_golden_matches_upstream_expected_values():
    expected = json.loads((KV / "v1" / "expected_values.json").read_text())["claude_golden"]
    s = parse_claude(KV / "v1" / "claude_golden.jsonl")
    assert balanced(s) and s.lines == 6 and not s.problems
    assert s.session_id == expected["session_id"] and s.project == "golden-project"
    assert (s.started_at, s.ended_at) == (expected["first_timestamp"], expected["last_timestamp"])
    assert (s.git_branch, s.agent_version, s.model) == ("main", "2.0.75", "claude-sonnet-4-20250514")
    # Upstream counts the tool_result lines as user messages (3 users); REFERENCE's model makes them role "tool".
    counts, usage = Counter(roles(s.messages)), s.usage()
    assert counts == {"user": 1, "tool": 2, "assistant": expected["assistant_messages"]}
    assert counts["user"] + counts["tool"] == expected["user_messages"] and len(s.messages) == expected["message_count"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (expected["input_tokens"], expected["output_tokens"])
    assert Counter(s.tool_sequence()) == expected["tool_calls"]
    assert any(p.kind == "thinking" for m in s.messages for p in m.parts) == expected["has_thinking"]
    assert [t.request.text for t in s.turns()] == ["Read the config file"]


def test_compaction_continues_through_logical_parent():
    expected = json.loads((KV / "expected_values_extended.json").read_text())["compaction"]["claude"]
    s = parse_claude(KV / "compaction" / "claude" / "session_with_compaction.jsonl")
    assert balanced(s) and s.used == 14 and s.compactions == expected["compaction_boundaries"]
    assert s.session_id == expected["session_id"] and not s.abandoned
    # The `summary` line here carries a message: it is kept as a compact_summary (upstream counts it: 13).
    assert len(s.messages) == expected["total_messages"]
    cut = next(i for i, m in enumerate(s.messages) if m.compact_summary)
    assert (cut, len(s.messages) - cut - 1) == (expected["message_count_before_compaction"],
                                                expected["message_count_after_compaction"])
    assert s.messages[cut].text.startswith("Previous conversation summary")
    assert s.messages[0].id == "cu1-compact" and s.messages[-1].id == "ca6-compact"
    assert [t.request.text[:10] for t in s.turns()] == ["Start work", "Continue w", "Now let's "]
    assert s.tool_sequence() == ["Read", "Edit", "Edit"]


def test_fork_keeps_the_branch_that_reached_the_end():
    expected = json.loads((KV / "expected_values_extended.json").read_text())["forks"]["claude"]
    s = parse_claude(KV / "forks" / "claude_forked_session.jsonl")
    branches = expected["branches"]
    assert balanced(s) and s.session_id == expected["session_id"]
    assert [m.id for m in s.messages[:3]] == ["fu1-fork", "fa1-fork", branches["branch_b"]["start_uuid"]]
    assert len(s.messages) == 2 + branches["branch_b"]["message_count"] and s.messages[-1].id == "fa5b-fork"
    assert [[m.id for m in b] for b in s.abandoned] == [["fu2a-fork", "fa2a-fork", "fu3a-fork", "fa3a-fork"]]
    assert len(s.abandoned[0]) == branches["branch_a"]["message_count"] == expected["total_messages"] - len(s.messages)
    # Upstream counts tool calls over both branches; the main branch alone has Write + Edit.
    everywhere = [p.tool_name for m in s.messages + s.abandoned[0] for p in m.tool_calls()]
    assert Counter(everywhere) == expected["tool_calls"] and s.tool_sequence() == ["Write", "Edit"]


def test_rejections_are_error_tool_results():
    expected = json.loads((KV / "expected_values_extended.json").read_text())["rejections"]["claude"]
    s = parse_claude(KV / "rejections" / "claude_with_rejection.jsonl")
    assert balanced(s) and len(s.messages) == expected["total_messages"]
    names = {p.call_id: p.tool_name for m in s.messages for p in m.tool_calls()}
    results = [p for m in s.messages if m.role == "tool" for p in m.parts]
    errors = [p for p in results if p.is_error]
    assert len(errors) == expected["rejections"]
    for part, detail in zip(errors, expected["rejection_details"]):
        assert part.call_id == detail["tool_use_id"] and names[part.call_id] == detail["tool_name"]
        assert part.text.endswith(detail["user_reason"])
    assert len(results) - len(errors) == expected["successful_tool_uses"]


def test_edge_cases_problems_duplicates_and_a_line_without_newline():
    s = parse_claude(DAAAIN / "edge_cases.jsonl")
    # 19 lines, but the last (a summary) has no trailing newline: it waits, as a line being written would.
    assert s.lines == 18 and balanced(s) and s.skipped == {"duplicate": 1}
    assert [line for line, _ in s.problems] == [11, 13, 14, 15, 16]
    assert "message object" in s.problems[0][1] and "no type" in s.problems[2][1]
    assert s.session_id == "edge_cases" and s.project == "tmp"  # two sessionIds; the file name decides
    assert s.started_at == "2025-06-14T10:02:00Z" and s.ended_at == "2025-06-14T11:03:30Z"
    assert len(s.messages) == 11 and s.messages[-1].tool_calls()[0].tool_name == "TodoWrite"
    assert s.messages[4].role == "tool" and (s.messages[4].parts[0].call_id, s.messages[4].parts[0].is_error) == (
        "tool_edge_001", True)
    assert "café, naïve, résumé, 中文" in s.messages[-2].text and "🎉" in s.messages[-2].text


@pytest.mark.parametrize("name, lines, messages, tools", [("representative_messages.jsonl", 11, 11, ["Edit", "Bash"]),
                                                           ("session_b.jsonl", 2, 2, []),
                                                           ("todowrite_examples.jsonl", 11, 11, ["TodoWrite"] * 3)])
def test_claude_code_log_samples(name, lines, messages, tools):
    s = parse_claude(DAAAIN / name)  # every record has parentUuid null: read as one linear chain
    assert balanced(s) and not s.problems and s.lines == lines
    assert len(s.messages) == messages and not s.abandoned and s.tool_sequence() == tools


def test_simonw_sample_without_parent_links():
    s = parse_claude(SIMONW / "sample_session.jsonl")
    assert balanced(s) and s.skipped == {"summary": 1} and s.used == 7
    assert s.session_id == "test-session-id" and s.cwd == "/project" and s.git_branch == "main"
    assert s.model is None and s.tool_sequence() == ["Write", "Bash"]
    assert roles(s.messages) == ["user", "assistant", "tool", "assistant", "tool", "user", "assistant"]
    assert [t.request.text for t in s.turns()] == ["Create a hello world function", "Now add a goodbye function"]


def test_split_response_merges_by_message_id(tmp_path):
    records = [
        user("u1", None, "fix it"),
        assistant("a1", "u1", [{"type": "thinking", "thinking": "hmm", "signature": "sig"}], "msg_X",
                  {"input_tokens": 10, "output_tokens": 1}),
        assistant("a2", "a1", [text("Looking.")], "msg_X", {"input_tokens": 10, "output_tokens": 2}),
        assistant("a3", "a2", [call("t1", "Read", file_path="a.py")], "msg_X",
                  {"input_tokens": 10, "output_tokens": 57, "server_tool_use": {"web_search_requests": 0}}),
        user("u2", "a3", [result("t1", "print(1)")]),
        assistant("a4", "u2", [call("t2", "Bash", command="ls")], "msg_Y", {"input_tokens": 20, "output_tokens": 5}),
        user("u3", "a4", [result("t2", "a.py")]),
        assistant("a5", "u3", [call("t3", "Bash", command="pwd")], "msg_Y", {"input_tokens": 20, "output_tokens": 9}),
        user("u4", "a5", [result("t3", "/x")]),
    ]
    s = parse_claude(write(tmp_path / f"{SID}.jsonl", records))
    assert balanced(s) and s.used == 9 and s.session_id == SID and s.project == "proj"
    assert roles(s.messages) == ["user", "assistant", "tool", "assistant", "tool", "tool"]
    first = s.messages[1]
    assert [p.kind for p in first.parts] == ["thinking", "text", "tool_call"] and first.id == "a1"
    assert first.parts[0].text == "hmm" and first.usage == {"input_tokens": 10, "output_tokens": 57}
    assert s.messages[3].tool_calls()[1].tool_input == {"command": "pwd"}  # interleaved results, one response
    assert s.usage() == {"input_tokens": 30, "output_tokens": 66}
    assert (s.git_branch, s.agent_version, s.model) == ("dev", "2.1.0", "claude-opus-4-5")


def test_inline_sidechain_becomes_a_linked_subagent(tmp_path):
    records = [
        user("u1", None, "find the bug"),
        assistant("a1", "u1", [call("toolu_task", "Task", description="Hunt", prompt="Find the bug in x.py")]),
        user("s1", None, "Find the bug in x.py", isSidechain=True),
        assistant("s2", "s1", [text("It is on line 3.")], isSidechain=True),
        user("u2", "a1", [result("toolu_task", [text("Line 3 is wrong.")])]),
        assistant("a2", "u2", [text("Fixed.")]),
    ]
    s = parse_claude(write(tmp_path / f"{SID}.jsonl", records))
    assert balanced(s) and s.used == 6 and not s.abandoned and s.messages[2].parts[0].text == "Line 3 is wrong."
    assert [m.id for m in s.messages] == ["u1", "a1", "u2", "a2"]
    (sub,) = s.subagents
    assert sub.spawned_by == "toolu_task" and sub.session_id == "s1"
    assert [m.text for m in sub.messages] == ["Find the bug in x.py", "It is on line 3."]


def test_subagent_files_are_found_and_linked(tmp_path):
    main = [
        user("u1", None, "research"),
        assistant("a1", "u1", [call("call_x", "Task", prompt="Map the API"), call("call_b", "Task", prompt="Old style"),
                               call("call_y", "Agent", prompt="Write tests")]),
        user("u2", "a1", [result("call_x", "done")], toolUseResult={"agentId": "x", "status": "completed"}),
        user("u3", "u2", [result("call_y", "tests written")]),
        user("u4", "u3", [result("call_b", [text("ok"), text("agentId: b (for resuming)")])]),
    ]
    path = write(tmp_path / f"{SID}.jsonl", main)

    def agent(agent_id, prompt, sid=SID):
        side = dict(isSidechain=True, agentId=agent_id, sessionId=sid)
        return [user(f"{agent_id}1", None, prompt, **side),
                assistant(f"{agent_id}2", f"{agent_id}1", [text("ok")], **side)]

    nested = tmp_path / SID / "subagents"
    write(nested / "agent-x.jsonl", agent("x", "something else entirely"))  # linked by toolUseResult.agentId
    (nested / "agent-x.meta.json").write_text('{"agentType": "Explore", "description": "Map"}')
    write(nested / "agent-y.jsonl", agent("y", "Write tests"))  # linked by prompt text
    write(nested / "agent-z.jsonl", agent("z", "Nobody asked"))  # no link
    write(nested / "agent-acompact-1.jsonl", agent("acompact-1", "compress"))  # internal: skipped
    write(tmp_path / "agent-b.jsonl", agent("b", "Old style, reworded"))  # beside, linked by "agentId: b"
    write(tmp_path / "agent-q.jsonl", agent("q", "Map the API", sid="another-session"))  # not ours

    assert parse_claude(path).subagents == []
    s = parse_claude_with_subagents(path)
    links = {sub.session_id: sub.spawned_by for sub in s.subagents}
    assert links == {"b": "call_b", "x": "call_x", "y": "call_y", "z": None}
    for sub in s.subagents:
        assert balanced(sub) and sub.lines == 2 and roles(sub.messages) == ["user", "assistant"]
    alone = parse_claude(nested / "agent-x.jsonl")  # a sub-agent file on its own: all sidechain, read as main
    assert alone.session_id == "x" and len(alone.messages) == 2


def test_record_types_blocks_images_errors_and_a_5mb_output(tmp_path):
    png = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}}
    records = [
        {"type": "file-history-snapshot", "messageId": "m0", "snapshot": {}},
        user("u1", None, [text("look at this"), png]),
        {"type": "progress", "uuid": "p1", "parentUuid": "u1", "data": {"type": "hook_progress"}},
        assistant("a1", "p1", [{"type": "server_tool_use", "id": "s"}, text("A cat."), call("t1", "Bash", command="no"),
                               call("t2", "Bash", command="cat big"), call("t3", "Read", file_path="s.png")]),
        {"type": "brand-new-thing", "uuid": "n1", "parentUuid": "a1"},
        {"type": "queue-operation", "operation": "enqueue"},
        user("u2", "n1", [result("t1", [text("exit 1"), text("boom")], is_error=True), result("t2", "x" * 5 * 2**20),
                          result("t3", [png]), text("[Request interrupted by user]")]),
        {"type": "system", "subtype": "turn_duration", "uuid": "sys1", "parentUuid": "u1"},  # a side leaf, last
    ]
    s = parse_claude(write(tmp_path / f"{SID}.jsonl", records))
    assert balanced(s) and s.used == 3 and not s.abandoned
    assert s.skipped == {"file-history-snapshot": 1, "progress": 1, "brand-new-thing": 1, "queue-operation": 1,
                         "system": 1, "block:server_tool_use": 1}
    assert [(m.role, m.id) for m in s.messages] == [("user", "u1"), ("assistant", "a1"), ("tool", "u2"), ("user", "u2")]
    assert [(p.kind, p.text) for p in s.messages[0].parts] == [("text", "look at this"), ("image", "image/png")]
    parts = s.messages[2].parts
    assert [(p.kind, p.call_id, p.is_error) for p in parts] == [
        ("tool_result", "t1", True), ("tool_result", "t2", False), ("tool_result", "t3", False), ("image", "t3", False)]
    assert parts[0].text == "exit 1\nboom" and len(parts[1].text) == 5 * 2**20 and parts[3].text == "image/png"
    assert s.messages[1].text == "A cat." and s.messages[3].text == "[Request interrupted by user]"


def test_crlf_blank_lines_invalid_utf8_and_a_half_written_line(tmp_path):
    first = json.dumps(user("u1", None, "caf\u00e9 PLACEHOLDER\nline two")).encode()
    lines = [first.replace(b"PLACEHOLDER", b"\xff\xfe ok"), json.dumps(assistant("a1", "u1", [text("ok")])).encode(),
             b"", b"   ", b'{"type": "user", "message": \xff}']  # the last: invalid UTF-8 *and* invalid JSON
    path = tmp_path / f"{SID}.jsonl"
    tail = json.dumps(user("u2", "a1", "three")).encode()
    path.write_bytes(b"".join(line + b"\r\n" for line in lines) + tail[:40])  # no newline yet: not parsed
    s = parse_claude(path)
    assert s.lines == 5 and s.blank == 2 and s.used == 2 and balanced(s) and [n for n, _ in s.problems] == [5]
    assert [m.text for m in s.messages] == ["café \ufffd\ufffd ok\nline two", "ok"]
    path.write_bytes(path.read_bytes() + tail[40:] + b"\n")
    s = parse_claude(path)
    assert s.lines == 6 and s.used == 3 and balanced(s) and s.messages[-1].text == "three"


def test_compact_boundary_meta_lines_and_a_rewind(tmp_path):
    records = [
        user("u1", None, "<command-name>/init</command-name>", isMeta=True),
        user("u2", "u1", "first question"),
        assistant("a1", "u2", [text("first answer")]),
        user("u3", "a1", "a question I take back"),
        assistant("a2", "u3", [text("an answer nobody keeps")]),
        {"type": "system", "subtype": "compact_boundary", "uuid": "cb", "parentUuid": None,
         "logicalParentUuid": "a1", "compactMetadata": {"trigger": "manual", "preTokens": 9000}},
        user("u4", "cb", "This session is being continued... Summary: ...", isCompactSummary=True),
        user("u5", "u4", "second question"),
        assistant("a3", "u5", [text("second answer")], usage={"input_tokens": 5, "output_tokens": 7}),
        assistant("a4", "a3", [text("sorry, error")], isApiErrorMessage=True),
    ]
    records[-1]["message"]["model"] = "<synthetic>"
    s = parse_claude(write(tmp_path / f"{SID}.jsonl", records))
    assert balanced(s) and s.compactions == 1 and s.used == 10
    assert [m.id for m in s.messages] == ["u1", "u2", "a1", "u4", "u5", "a3", "a4"]
    assert [[m.id for m in b] for b in s.abandoned] == [["u3", "a2"]]
    assert s.messages[0].meta and s.messages[3].compact_summary
    assert [t.request.text for t in s.turns() if t.request] == ["first question", "second question"]
    assert s.model == "claude-opus-4-5"  # the <synthetic> error reply does not name the session's model
