"""The experience tools through the MCP SDK's own client: `experience_feedback` flags a recorded answer (and offers a
client's correction); a malformed call is refused with what was wrong and changes nothing; `experience_summary`
counts the buffer."""
from __future__ import annotations

import json

from mcp import Client

from app.core.experience import buffer, config
from tests.mcp.test_mcp import _text, run_async

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
GOOD_CALL = {"role": "assistant", "tool_calls": [{"type": "function", "function": {
    "name": "read_file", "arguments": json.dumps({"path": "README.md"})}}]}


def record(store, exp_id: str) -> None:
    buffer.record(store, buffer.Recorded(id=exp_id, request={"messages": [{"role": "user", "content": "open it"}],
                                                             "tools": TOOLS},
                                         answer={"role": "assistant", "content": "Sure, opening it now."},
                                         client="codex", finish_reason="stop"))


def test_feedback_flags_the_answer_and_offers_the_correction(store):
    from app.mcp.server import build_server

    record(store, "exp-1")
    record(store, "exp-2")
    config.set_buffer(store, "require_review", True)

    async def go() -> None:
        async with Client(build_server(store)) as client:
            bad = await client.call_tool("experience_feedback", {"experience": "exp-1", "rating": "down",
                                                                 "note": "it never opened the file"})
            assert not bad.is_error, _text(bad)
            assert bad.structured_content["state"] == "flagged" and bad.structured_content["feedback"] == "down"
            assert bad.structured_content["reasons"] == [
                {"kind": "client", "text": "the client marked the answer bad: it never opened the file"}]

            fixed = await client.call_tool("experience_feedback", {"experience": "exp-2", "rating": "down",
                                                                   "correction": GOOD_CALL})
            assert not fixed.is_error, _text(fixed)
            offered = fixed.structured_content["corrections"]
            assert [(c["source"], c["state"]) for c in offered] == [("client", "waiting")]
            assert fixed.structured_content["state"] == "corrected"

            summary = await client.call_tool("experience_summary", {})
            assert not summary.is_error, _text(summary)
            assert summary.structured_content["enabled"] is False
            assert summary.structured_content["by_reason"]["client"] == 2
            assert summary.structured_content["corrections"] == {"waiting": 1}

    run_async(go)
    assert buffer.get(store, "exp-1")["feedback"] == "down"
    assert buffer.get(store, "exp-2")["corrections"][0]["decided_by"] == ""  # waits for a person


def test_a_malformed_feedback_call_is_refused_with_what_was_wrong(store):
    from app.mcp.server import build_server

    record(store, "exp-1")

    async def go() -> None:
        async with Client(build_server(store)) as client:
            rating = await client.call_tool("experience_feedback", {"experience": "exp-1", "rating": "meh"})
            assert rating.is_error and "rating" in _text(rating) and "'up' or 'down'" in _text(rating)

            shape = await client.call_tool("experience_feedback", {"experience": "exp-1", "rating": "down",
                                                                   "correction": {"role": "user", "content": "x"}})
            assert shape.is_error
            assert "the correction must be the better answer's text or an assistant message" in _text(shape)

            missing = await client.call_tool("experience_feedback", {"experience": "nope", "rating": "up"})
            assert missing.is_error and "there is no experience 'nope'" in _text(missing)

            lacking = await client.call_tool("experience_feedback", {"experience": "exp-1"})
            assert lacking.is_error and "rating" in _text(lacking)

    run_async(go)
    untouched = buffer.get(store, "exp-1")
    assert untouched["feedback"] is None and untouched["state"] == "recorded" and untouched["corrections"] == []
