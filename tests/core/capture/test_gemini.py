"""Gemini CLI recordings: the older JSON document; JSONL with $set, $rewindTo, repeated ids, tool errors, bad lines."""
from __future__ import annotations

import json

from tests.core.capture.helpers import KV, expected, write
from app.core.capture.parsers.gemini import parse_gemini

META = {"sessionId": "g-1", "projectHash": "f00d", "startTime": "2025-06-01T10:00:00Z",
        "lastUpdated": "2025-06-01T10:00:00Z"}






def user(id_: str, text: str) -> dict:
    return {"id": id_, "timestamp": f"2025-06-01T10:00:{len(id_):02d}Z", "type": "user", "content": text}


def gemini(id_: str, text: str, **extra) -> dict:
    return {"id": id_, "timestamp": "2025-06-01T10:01:00Z", "type": "gemini", "content": text,
            "model": "gemini-2.5-flash", **extra}


def texts(messages) -> list[str]:
    return [m.text for m in messages]


def test_older_single_document_format():
    want = expected("v1/expected_values.json", "gemini_golden")
    s = parse_gemini(KV / "v1" / "gemini_golden.json")
    assert (s.agent, s.session_id, s.project) == ("gemini", want["session_id"], want["workspace"])
    assert (s.started_at, s.ended_at) == (want["first_timestamp"], want["last_timestamp"])
    assert [m.role for m in s.messages] == ["user", "assistant", "tool", "user", "assistant"]
    assert sum(m.role == "user" for m in s.messages) == want["user_messages"]
    assert sum(m.role == "assistant" for m in s.messages) == want["assistant_messages"]
    reply = s.messages[1]
    assert [p.kind for p in reply.parts] == ["thinking", "text", "tool_call"] and reply.model == "gemini-2.5-pro"
    assert reply.parts[0].text == "File Reading Request\nUser wants to see the contents of package.json"
    assert reply.tool_calls()[0].tool_input == {"file_path": "package.json"}
    result = s.messages[2].parts[0]
    assert (result.call_id, result.tool_name, result.is_error) == ("read_file-001", "read_file", False)
    assert json.loads(result.text) == {"name": "test-project", "version": "1.0.0"}
    assert s.messages[2].parent_id == "msg-g2"
    assert s.tool_sequence() == ["read_file"] * want["tool_calls"]["read_file"]
    usage = s.usage()
    assert (usage["input_tokens"], usage["output_tokens"]) == (want["input_tokens"], want["output_tokens"])
    assert (usage["reasoning_output_tokens"], usage["cache_read_input_tokens"]) == (35, 50)
    assert (s.model, s.problems, dict(s.skipped), s.abandoned) == ("gemini-2.5-pro", [], {}, [])


def test_tool_error_status_and_response_error():
    want = expected("expected_values_extended.json", "rejections", "gemini")
    s = parse_gemini(KV / want["file"])
    assert s.session_id == want["session_id"] and s.lines == 10 and not s.problems
    assert sum(m.role in ("user", "assistant") for m in s.messages) == want["total_messages"]
    results = [p for m in s.messages if m.role == "tool" for p in m.parts]
    errors = [p for p in results if p.is_error]
    assert len(errors) == want["tool_errors"] and len(results) - len(errors) == want["successful_tool_calls"]
    detail = want["tool_error_details"][0]
    assert (errors[0].call_id, errors[0].tool_name, errors[0].text) == \
        (detail["tool_call_id"], detail["tool_name"], detail["error"])
    calls = {p.call_id: m for m in s.messages for p in m.tool_calls()}
    assert all(calls[r.call_id].id == m.parent_id for m in s.messages if m.role == "tool" for r in m.parts)
    assert len(s.turns()) == 4 and s.usage()["input_tokens"] == 980


def test_repeated_id_replaces_in_place_and_set_updates_metadata(tmp_path):
    running = {"id": "t1", "name": "run_shell_command", "args": {"command": "ls"}, "status": "executing"}
    done = {**running, "status": "success", "result": [{"functionResponse": {"id": "t1", "response": {
        "output": "a.txt"}}}]}
    s = parse_gemini(write(
        tmp_path / ".gemini" / "tmp" / "myproj" / "chats" / "session-2025-06-01T10-00-g1.jsonl", META,
        user("u1", "list"), gemini("g1", "", toolCalls=[running]), {"$set": {"lastUpdated": "2025-06-01T10:05:00Z"}},
        gemini("g1", "Listing.", toolCalls=[done], tokens={"input": 7, "output": 3}), user("u2", "thanks"),
        {"$set": {"directories": ["/home/me/work/app"], "summary": "listing"}}))
    assert [m.role for m in s.messages] == ["user", "assistant", "tool", "user"]  # g1 kept its place
    assert s.messages[1].text == "Listing." and s.messages[1].usage == {"input_tokens": 7, "output_tokens": 3}
    assert s.messages[2].parts[0].text == "a.txt" and s.messages[1].line == 5
    assert (s.cwd, s.project, s.ended_at) == ("/home/me/work/app", "app", "2025-06-01T10:05:00Z")


def test_chats_folder_names_the_project_and_unfinished_calls_have_no_result(tmp_path):
    waiting = {"id": "t1", "name": "write_file", "args": {}, "status": "awaiting_approval"}
    cancelled = {"id": "t2", "name": "write_file", "args": {}, "status": "cancelled", "result": None}
    s = parse_gemini(write(tmp_path / "myproj" / "chats" / "session-x.jsonl", META, user("u1", "write"),
                           gemini("g1", "", toolCalls=[waiting, cancelled])))
    assert s.project == "myproj" and len(s.messages[1].tool_calls()) == 2
    results = [p for m in s.messages if m.role == "tool" for p in m.parts]
    assert [(p.call_id, p.is_error) for p in results] == [("t2", True)]


def test_rewinds_move_the_target_and_what_follows_to_abandoned(tmp_path):
    s = parse_gemini(write(
        tmp_path / "s.jsonl", META, user("u1", "first"), gemini("g1", "reply 1"), user("u2", "second"),
        gemini("g2", "reply 2"), {"$rewindTo": "u2"}, user("u3", "second, reworded"), gemini("g3", "reply 3"),
        {"$rewindTo": "g3"}, gemini("g4", "reply 4")))
    # Gemini CLI's rewindTo removes "from (and including) the specified ID onwards" (chatRecordingService.ts);
    # the brief said "the records after that id": we follow the CLI that wrote the file.
    assert texts(s.messages) == ["first", "reply 1", "second, reworded", "reply 4"]
    assert [texts(branch) for branch in s.abandoned] == [["second", "reply 2"], ["reply 3"]]
    assert [t.request.text for t in s.turns()] == ["first", "second, reworded"]


def test_rewind_to_an_unknown_id_clears_the_history_as_gemini_does(tmp_path):
    s = parse_gemini(write(tmp_path / "s.jsonl", META, user("u1", "first"), {"$rewindTo": "nope"},
                           user("u2", "again")))
    assert texts(s.messages) == ["again"] and texts(s.abandoned[0]) == ["first"]
    assert s.problems and s.problems[0][0] == 3 and "nope" in s.problems[0][1]


def test_set_messages_rewrite_keeps_history_and_marks_new_ones(tmp_path):
    rewrite = {"$set": {"messages": [{"id": "sum", "type": "user", "content": [{"text": "Summary so far"}]},
                                     {"id": "u2", "type": "user", "content": "masked"}]}}
    s = parse_gemini(write(tmp_path / "s.jsonl", META, user("u1", "first"), gemini("g1", "one"),
                           user("u2", "second"), rewrite, gemini("g2", "two")))
    assert texts(s.messages) == ["first", "one", "second", "Summary so far", "two"]  # recorded u2 wins
    assert s.compactions == 1 and s.messages[3].meta and not s.messages[2].meta
    assert [t.request.text for t in s.turns()] == ["first", "second"]


def test_info_error_unknown_types_and_bad_lines(tmp_path):
    path = write(tmp_path / "s.jsonl", META, user("u1", "hi"),
                 {"id": "i1", "type": "info", "content": "Logged in"},
                 {"id": "e1", "type": "error", "content": [{"text": "quota exceeded"}]},
                 {"id": "x1", "type": "hologram", "content": "?"}, "[]", "{\"foo\": 1}", "{broken",
                 raw="\r\n".join([json.dumps(gemini("g1", "over CRLF")), ""]).encode())
    with path.open("ab") as fh:
        fh.write(json.dumps(user("u2", "caf\u00e9")).encode().replace(b"\\u00e9", b"\xe9") + b"\n")
        fh.write(json.dumps(user("u3", "half")).encode()[:20])  # still being written
    s = parse_gemini(path)
    assert [(m.role, m.meta, m.text) for m in s.messages] == [
        ("user", False, "hi"), ("system", True, "Logged in"), ("system", True, "quota exceeded"),
        ("assistant", False, "over CRLF"), ("user", False, "caf\ufffd")]
    assert dict(s.skipped) == {"hologram": 1} and sorted(line for line, _ in s.problems) == [6, 7, 8]
    assert s.lines == 10 and s.session_id == "g-1" and s.model == "gemini-2.5-flash"


def test_content_as_parts_with_thoughts_calls_and_images(tmp_path):
    content = [{"text": "Plan first", "thought": True}, {"text": "Here:"},
               {"functionCall": {"id": "f9", "name": "glob", "args": {"pattern": "*.py"}}},
               {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]
    s = parse_gemini(write(tmp_path / "s.jsonl", META, gemini("g1", content),
                           {"id": "u9", "type": "user", "content": [{"functionResponse": {
                               "id": "f9", "name": "glob", "response": {"error": "denied"}}}]}))
    assert [p.kind for p in s.messages[0].parts] == ["thinking", "text", "tool_call", "image"]
    assert s.messages[0].parts[3].text == "image/png"
    tool = s.messages[1]  # a user record holding only a function response is a tool result
    assert (tool.role, tool.parts[0].call_id, tool.parts[0].text, tool.parts[0].is_error) == \
        ("tool", "f9", "denied", True)
