"""Codex CLI rollouts: real fixtures (golden, compaction, escalation, a real 0.77 session) and hand-made edge cases."""
from __future__ import annotations

import json

from tests.core.capture.helpers import KV, SIMONW, expected, write
from app.core.capture.parsers.codex import parse_codex

TS = "2025-03-01T10:00:00.000Z"






def item(payload: dict, kind: str = "response_item") -> dict:
    return {"timestamp": TS, "type": kind, "payload": payload}


def user(text: str) -> dict:
    return item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})


def said(text: str) -> dict:
    return item({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})


def call(call_id: str, arguments: str, name: str = "shell") -> dict:
    return item({"type": "function_call", "name": name, "arguments": arguments, "call_id": call_id})


def output(call_id: str, out, kind: str = "function_call_output") -> dict:
    return item({"type": kind, "call_id": call_id, "output": out})


def tokens(total_in: int, total_out: int, last_in: int = 0, last_out: int = 0) -> dict:
    info = {"total_token_usage": {"input_tokens": total_in, "output_tokens": total_out},
            "last_token_usage": {"input_tokens": last_in, "output_tokens": last_out}}
    return item({"type": "token_count", "info": info}, "event_msg")


def results(session) -> dict:
    return {p.call_id: p for m in session.messages if m.role == "tool" for p in m.parts}


def test_golden_rollout_metadata_messages_and_links():
    want = expected("v1/expected_values.json", "codex_golden")
    s = parse_codex(KV / "v1" / "codex_golden.jsonl")
    assert (s.agent, s.session_id) == ("codex", want["session_id"])
    assert (s.cwd, s.project, s.git_branch) == ("/home/testuser/codex-project", "codex-project", "main")
    assert (s.agent_version, s.model) == ("0.77.0", "gpt-4.5-turbo")
    assert (s.started_at, s.ended_at) == ("2025-01-04T09:00:00.000Z", "2025-01-04T09:00:13.000Z")
    assert [m.role for m in s.messages] == ["user", "assistant", "tool", "user", "assistant"]
    assert sum(m.role == "user" for m in s.messages) == want["user_messages"]
    assert sum(m.role == "assistant" for m in s.messages) == want["assistant_messages"]
    first = s.messages[1]  # reasoning + text + call of one response merge into one message
    assert [p.kind for p in first.parts] == ["thinking", "text", "tool_call"]
    assert first.parts[0].text == "Preparing to list directory contents"
    assert first.tool_calls()[0].tool_input == {"command": "ls -la"}  # the JSON string, parsed
    result = s.messages[2].parts[0]
    assert (result.kind, result.call_id, result.tool_name, result.is_error) == \
        ("tool_result", first.tool_calls()[0].call_id, "shell", False)
    assert result.text.startswith("total 24") and result.text.endswith("README.md")
    assert s.tool_sequence() == ["shell"] * want["tool_calls"]["shell"]
    assert [t.request.text for t in s.turns()] == ["List the files in the current directory", "Thanks!"]
    assert (s.lines, s.problems, dict(s.skipped), s.compactions) == (10, [], {}, 0)


def test_golden_usage_equals_the_rollouts_final_total():
    want = expected("v1/expected_values.json", "codex_golden")
    s = parse_codex(KV / "v1" / "codex_golden.jsonl")
    usage = s.usage()
    assert usage["input_tokens"] == want["input_tokens"] == 300
    # Upstream expects 150 = output_tokens 135 + reasoning_output_tokens 15; OpenAI's output_tokens already
    # include the reasoning tokens, and the brief says usage must equal the rollout's final total: 135.
    assert usage["output_tokens"] == 135
    assert (usage["cache_read_input_tokens"], usage["reasoning_output_tokens"]) == (120, 15)
    assert s.messages[-1].usage["output_tokens"] == 135  # the last response carries the one report


def test_compacted_record_counts_and_keeps_its_summary():
    want = expected("expected_values_extended.json", "compaction", "codex")
    s = parse_codex(KV / want["session_file"])
    assert s.session_id == want["session_id"] and s.compactions == want["compacted_records"] == 1
    summaries = [m for m in s.messages if m.compact_summary]
    assert len(summaries) == 1 and summaries[0].role == "user" and summaries[0].line == 13
    assert all(f"**{section}**" in summaries[0].text for section in want["compacted_summary_sections"])
    assert s.tool_sequence() == ["shell"] * want["tool_calls"]["shell"]
    requests = [t.request.text for t in s.turns()]  # the summary is not a user request
    assert requests == ["Help me build the API endpoints", "Add the user CRUD endpoints",
                        "Now add product endpoints", "Now add the authentication middleware"]
    assert s.git_branch == "feature/api" and s.usage()["input_tokens"] == 85000
    assert s.usage()["output_tokens"] == 42000 and results(s)["call_compact_002"].text == ""


def test_escalations_without_output_and_the_aborted_turn():
    want = expected("expected_values_extended.json", "rejections", "codex")
    s = parse_codex(KV / want["file"])
    calls = {p.call_id: p for m in s.messages for p in m.tool_calls()}
    escalated = [c for c in calls.values() if c.tool_input.get("sandbox_permissions") == "require_escalated"]
    assert len(escalated) == want["escalation_requests"] == 2
    for detail in want["escalation_details"]:
        # upstream keeps the escaped "\\n" of the arguments string; parsing the JSON makes it a newline
        assert calls[detail["call_id"]].tool_input["command"].replace("\n", "\\n") == detail["command"]
        assert detail["call_id"] not in results(s)  # no output: never ran
    done = [r for r in results(s).values() if not r.is_error]
    assert len(done) == want["successful_shell_calls"] and results(s)["call_esc_003"].text == "Hello World"
    last = s.messages[-1]
    assert (last.role, last.meta, last.text) == ("system", True, "turn aborted: user_cancelled")
    assert s.usage()["input_tokens"] == 1500 and s.usage()["output_tokens"] == 800
    assert len(s.turns()) == 5 and s.problems == [] and not s.skipped


def test_real_codex_077_session_marks_harness_messages_and_drops_the_echo():
    s = parse_codex(SIMONW / "sample_codex_session.jsonl")
    assert s.session_id == "019b64e5-57fa-7463-b644-fba7e456f905"
    assert (s.project, s.agent_version, s.model, s.git_branch) == ("homelab-migration", "0.77.0", "gpt-5.2-codex", None)
    assert [(m.role, m.meta) for m in s.messages] == [("user", True), ("user", True), ("user", False)]
    assert s.messages[0].text.startswith("# AGENTS.md instructions for")  # 0.77 injects AGENTS.md like this
    assert s.messages[1].text.startswith("<environment_context>")
    turns = s.turns()  # the event_msg user_message repeated the request: kept once
    assert len(turns) == 2 and turns[0].request is None and turns[1].request.text.startswith("can you analyse")
    assert (s.lines, s.problems, dict(s.skipped), s.usage()) == (11, [], {}, {})
    assert (s.started_at, s.ended_at) == ("2025-12-28T12:18:30.522Z", "2025-12-28T12:21:52.360Z")


def test_unknown_types_bad_lines_crlf_invalid_utf8_and_a_truncated_tail(tmp_path):
    good = [item({"id": "s-1", "cwd": "/w/proj", "cli_version": "0.80.0"}, "session_meta"),
            {"timestamp": TS, "type": "mystery", "payload": {}},
            item({"type": "task_started"}, "event_msg"),
            item({"type": "ghost_snapshot"}),
            "[1, 2]", "{\"payload\": {}}", "{not json", ""]
    path = write(tmp_path / "rollout.jsonl", *good)
    crlf = json.dumps(said("over CRLF")).encode() + b"\r\n"
    bad_utf8 = json.dumps(user("caf\u00e9")).encode().replace("\\u00e9".encode(), b"\xe9") + b"\n"
    with path.open("ab") as fh:
        fh.write(crlf + bad_utf8 + json.dumps(user("half written")).encode()[:30])
    s = parse_codex(path)
    assert dict(s.skipped) == {"mystery": 1, "event_msg:task_started": 1, "response_item:ghost_snapshot": 1}
    problems = sorted(s.problems)
    assert [line for line, _ in problems] == [5, 6, 7]
    assert "not a JSON object" in problems[0][1] and "without a type" in problems[1][1]
    assert "not valid JSON" in problems[2][1]
    assert s.lines == 10  # complete lines: the half-written one waits for its newline
    assert [m.text for m in s.messages] == ["over CRLF", "caf\ufffd"]
    assert (s.session_id, s.project, s.agent_version) == ("s-1", "proj", "0.80.0")


def test_tool_outputs_errors_and_raw_arguments(tmp_path):
    exec_json = json.dumps({"output": "boom", "metadata": {"exit_code": 1, "duration_seconds": 0.1}})
    patch_json = json.dumps({"output": "Success. Updated a.py\n", "metadata": {"exit_code": 0}})
    s = parse_codex(write(
        tmp_path / "r.jsonl", user("go"),
        call("c1", '{"command": ["false"]}'), output("c1", exec_json),
        call("c2", "not { json"), output("c2", "Exit code: 2\nWall time: 0.1 seconds\nOutput:\nno such file"),
        call("c3", '{"command": ["true"]}'), output("c3", "Exit code: 0\nWall time: 0 seconds\nOutput:\n"),
        item({"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch", "call_id": "c4"}),
        output("c4", patch_json, "custom_tool_call_output"),
        item({"type": "local_shell_call", "call_id": "c5", "action": {"type": "exec", "command": ["ls"]}}),
        output("c5", "exec command rejected by user"),
        output("c6", [{"type": "input_text", "text": "from an MCP tool"}])))
    calls = {p.call_id: p for m in s.messages for p in m.tool_calls()}
    assert [m.role for m in s.messages] == ["user"] + ["assistant", "tool"] * 5 + ["tool"]
    assert calls["c2"].tool_input == "not { json"  # not JSON: the raw string is kept
    assert calls["c4"].tool_input == "*** Begin Patch" and calls["c5"].tool_name == "local_shell"
    r = results(s)
    assert {k: v.is_error for k, v in r.items()} == \
        {"c1": True, "c2": True, "c3": False, "c4": False, "c5": True, "c6": False}
    assert (r["c1"].text, r["c4"].text, r["c6"].text) == ("boom", "Success. Updated a.py\n", "from an MCP tool")
    assert (r["c4"].tool_name, r["c6"].tool_name) == ("apply_patch", None)


def test_user_and_agent_text_kept_once_whichever_comes_first(tmp_path):
    echo = lambda kind, text: item({"type": kind, "message": text}, "event_msg")  # noqa: E731
    s = parse_codex(write(
        tmp_path / "r.jsonl",
        echo("user_message", "fix it"), user("fix it"), said("done"), echo("agent_message", "done"),
        user("<user_instructions>\nbe terse\n</user_instructions>"),
        echo("user_message", "typed only in the event"), echo("agent_message", "said only in the event"),
        echo("user_message", "fix it"), user("fix it")))
    assert [(m.role, m.text, m.meta) for m in s.messages] == [
        ("user", "fix it", False), ("assistant", "done", False),
        ("user", "<user_instructions>\nbe terse\n</user_instructions>", True),
        ("user", "typed only in the event", False), ("assistant", "said only in the event", False),
        ("user", "fix it", False)]


def test_token_reports_are_spread_over_responses_and_sum_to_the_final_total(tmp_path):
    s = parse_codex(write(
        tmp_path / "r.jsonl", tokens(10, 1, 10, 1), user("a"), said("one"), tokens(110, 21, 100, 20),
        tokens(110, 21, 100, 20), call("c", "{}"), output("c", "ok"), said("two"), tokens(300, 61, 190, 40),
        {"timestamp": TS, "type": "event_msg", "payload": {"type": "token_count", "info": None}}))
    replies = [m for m in s.messages if m.role == "assistant"]
    # the report before any reply waits for the first one; a repeated report adds nothing
    assert [m.usage for m in replies] == [{"input_tokens": 110, "output_tokens": 21}, {},
                                          {"input_tokens": 190, "output_tokens": 40}]
    assert s.usage() == {"input_tokens": 300, "output_tokens": 61}


def test_older_rollouts_without_the_envelope(tmp_path):
    s = parse_codex(write(
        tmp_path / "rollout-2025-05-01T10-00-00-5973b6c0-94b8-487b-a530-2aeb6098ae0e.jsonl",
        {"id": "5973b6c0-94b8-487b-a530-2aeb6098ae0e", "timestamp": "2025-05-01T10:00:00Z", "instructions": ""},
        {"record_type": "state"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]},
        {"type": "function_call", "name": "shell", "arguments": "{\"command\": [\"ls\"]}", "call_id": "c"},
        {"type": "function_call_output", "call_id": "c", "output": "{\"output\": \"a\\n\", \"metadata\": "
                                                                    "{\"exit_code\": 0}}"}))
    assert s.session_id == "5973b6c0-94b8-487b-a530-2aeb6098ae0e" and s.started_at == "2025-05-01T10:00:00Z"
    assert [m.role for m in s.messages] == ["user", "assistant", "tool"] and s.messages[2].parts[0].text == "a\n"
    assert dict(s.skipped) == {"record_type:state": 1} and s.problems == []
