"""The Responses API on the served student, on fixed inputs: a request as Codex CLI sends one (instructions, message /
function_call / function_call_output / reasoning items, flat function tools beside hosted ones) reaches the student as
the same chat request an OpenAI chat client sends for that conversation; the chat answer (tool calls read by
openai_tools) comes back as output items, whole or as streaming events, each one the `openai` client's types accept
and with the fields Codex parses (codex-rs `ResponseItem`, `ResponseCompleted`); the recorder keeps it as the chat
exchange it was. The llama.cpp completions are stand-ins (fixed texts); the real model answers in
tests/engine/test_openai_client_smollm2.py."""
from __future__ import annotations

import json

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from app.core.base.errors import Explained
from engine.serve import openai_tools as O
from engine.serve import responses as R
from engine.serve.recorder import Exchange, to_recorded
from tests.engine.test_openai_tools import CALL, HISTORY, OFFERED, TOOLS, chunks, completion

EVENT = TypeAdapter(ResponseStreamEvent)
FLAT_TOOLS = [{"type": "function", "name": t["function"]["name"], "strict": False,
               "parameters": t["function"]["parameters"], **({"description": t["function"]["description"]}
                                                             if "description" in t["function"] else {})}
              for t in TOOLS]
CODEX_TOOLS = [*FLAT_TOOLS, {"type": "local_shell"}, {"type": "web_search"},
               {"type": "custom", "name": "apply_patch", "description": "a patch", "format": {"type": "grammar", "syntax": "lark",
                                                                     "definition": "start: begin_patch"}}]
ITEMS = [  # HISTORY (tests/engine/test_openai_tools.py) as Codex sends it, with the items the student does not read
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "The tests fail; fix utils.py"}]},
    {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA…"},
    {"type": "function_call", "name": "Read", "arguments": '{"file_path": "utils.py"}', "call_id": "call_1"},
    {"type": "function_call_output", "call_id": "call_1", "output": "def add(a, b):\n    return a - b"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Found it."}]},
    {"type": "function_call", "name": "Bash", "arguments": '{"command": "pytest"}', "call_id": "call_2"},
    {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "1 failed"}]},
    {"type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "pytest"}},
]
CODEX = {"model": "nightschool", "instructions": HISTORY[0]["content"], "input": ITEMS, "tools": CODEX_TOOLS,
         "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": None, "store": False, "stream": True,
         "include": [], "prompt_cache_key": "0199-thread"}


def test_a_codex_request_reaches_the_student_as_the_same_chat_request():
    chat = R.chat_request(CODEX)
    assert chat["tools"] == TOOLS and chat["tool_choice"] == "auto" and chat["stream"] is True
    assert "max_tokens" not in chat and "store" not in chat and "include" not in chat
    # the prompt the student reads is the one of the same conversation sent to /v1/chat/completions
    assert O.prompt(chat["messages"], chat["tools"], native=False) == O.prompt(HISTORY, TOOLS, native=False)
    assert O.prompt(chat["messages"], chat["tools"], native=True) == O.prompt(HISTORY, TOOLS, native=True)

    plain = R.chat_request({"model": "nightschool", "input": "hello", "max_output_tokens": 16, "temperature": 0,
                            "top_p": None, "tools": [{"type": "web_search"}], "tool_choice": "auto"})
    assert plain == {"model": "nightschool", "messages": [{"role": "user", "content": "hello"}], "stream": False,
                     "max_tokens": 16, "temperature": 0}  # no function tool: a plain chat
    named = R.chat_request({**CODEX, "tool_choice": {"type": "function", "name": "Bash"}})
    assert named["tool_choice"] == {"type": "function", "function": {"name": "Bash"}}
    custom = R.chat_request({"input": [{"type": "custom_tool_call", "call_id": "c", "name": "apply_patch",
                                        "input": "*** Begin Patch"},
                                       {"type": "custom_tool_call_output", "call_id": "c", "output": "Done"}]})
    assert custom["messages"] == [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {
            "name": "apply_patch", "arguments": '{"input": "*** Begin Patch"}'}}]},
        {"role": "tool", "tool_call_id": "c", "content": "Done"}]


@pytest.mark.parametrize("body,said", [
    ({"input": "hi", "previous_response_id": "resp_1"}, "keeps no responses"),
    ({"input": 3}, "neither text nor a list"),
    ({"input": ["hi"]}, "not an object"),
    ([], "not a JSON object"),
])
def test_a_request_it_cannot_answer_is_refused_in_words(body, said):
    with pytest.raises(Explained, match=said):
        R.chat_request(body)


def codex_reads(item: dict) -> None:
    """The fields codex-rs deserializes an output item with (`ResponseItem`: message content parts, function_call's
    name, arguments as a string, call_id)."""
    if item["type"] == "message":
        assert item["role"] == "assistant" and all(p["type"] == "output_text" and isinstance(p["text"], str)
                                                   for p in item["content"])
    else:
        assert item["type"] == "function_call" and isinstance(item["arguments"], str)
        assert item["call_id"].startswith("call_") and item["name"] in OFFERED


CASES = [  # (the student's text, llama's finish) -> (output as (type, text or (name, arguments)), status, finish)
    ("Let me run them.\n" + CALL, "stop", [("message", "Let me run them."),
                                           ("function_call", ("Bash", {"command": "pytest -q"}))], "completed",
     "tool_calls"),
    (CALL, "stop", [("function_call", ("Bash", {"command": "pytest -q"}))], "completed", "tool_calls"),
    ("Paris.", "stop", [("message", "Paris.")], "completed", "stop"),
    ('<tool_call>{"name": "Bash", "arguments": {}}</tool_call>', "stop",
     [("message", '<tool_call>{"name": "Bash", "arguments": {}}</tool_call>')], "completed", O.INVALID),
    ("I would say", "length", [("message", "I would say")], "incomplete", "length"),
    ("", "stop", [("message", "")], "completed", "stop"),
]


def shown(output: list[dict]) -> list[tuple]:
    return [("message", "".join(p["text"] for p in i["content"])) if i["type"] == "message" else
            ("function_call", (i["name"], json.loads(i["arguments"]))) for i in output]


def without_ids(message: dict) -> dict:
    return {**message, "tool_calls": [{**c, "id": "call_"} for c in message.get("tool_calls", [])]}


def sse(events: list[dict]) -> bytes:
    return "".join(f"event: {e['type']}\r\ndata: {json.dumps(e)}\r\n\r\n" for e in events).encode()


@pytest.mark.parametrize("text,finish,output,status,reason", CASES)
def test_the_answer_comes_back_as_output_items_whole_and_streamed_alike(text, finish, output, status, reason):
    whole = R.response(CODEX, O.reply(completion(text, finish), OFFERED))
    Response.model_validate(whole)  # the openai client's type holds it
    assert (shown(whole["output"]), whole["status"], whole["nightschool"]["finish_reason"]) == (output, status, reason)
    assert whole["usage"] == {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                              "output_tokens": 5,
                              "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}
    assert whole["incomplete_details"] == ({"reason": "max_output_tokens"} if status == "incomplete" else None)
    for item in whole["output"]:
        codex_reads(item)

    for size in (1, 4):
        stream = R.Stream(CODEX)
        events = stream.start()
        for chunk in O.streamed(chunks(text, finish, size), OFFERED):
            events += stream.feed(chunk)
        events += stream.end(lambda out: R.usage(10, len(out)))
        for event in events:
            EVENT.validate_python(event)  # each one of the client's event types
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
        last = events[-1]
        assert last["type"] == f"response.{status}" and last["response"]["usage"]["output_tokens"] == len(output)
        assert (shown(last["response"]["output"]), last["response"]["nightschool"]["finish_reason"]) == (output, reason)
        done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
        assert done == last["response"]["output"] and [e["item"]["id"] for e in events if e["type"] ==
                                                       "response.output_item.added"] == [i["id"] for i in done]
        for at, item in enumerate(done):  # the deltas of each item add up to it
            codex_reads(item)
            pieces = "".join(e["delta"] for e in events if e.get("item_id") == item["id"] and "delta" in e)
            assert pieces == (item["arguments"] if item["type"] == "function_call" else item["content"][0]["text"])
            assert {e["output_index"] for e in events if e.get("item_id") == item["id"]} == {at}
        # the recorder reads the stream as it reads the whole answer
        (got, got_finish), (want, want_finish) = (R.answer_of(body, stream)[:2] for body, stream in (
            (sse(events), True), (json.dumps(whole).encode(), False)))
        assert (without_ids(got), got_finish) == (without_ids(want), want_finish)


def test_text_as_it_comes_then_the_call_once_checked():
    stream = R.Stream(CODEX)
    events = stream.start()
    for chunk in O.streamed(chunks("Running.\n" + CALL, size=2), OFFERED):
        events += stream.feed(chunk)
    kinds = [e["type"] for e in events]
    assert kinds.count("response.output_text.delta") > 1  # words go out before the call is written
    assert kinds[kinds.index("response.output_text.done"):] == [
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", *["response.function_call_arguments.delta"] * (kinds.count(
            "response.function_call_arguments.delta"))]
    added = events[kinds.index("response.output_item.added", kinds.index("response.output_text.done"))]["item"]
    assert (added["type"], added["name"], added["arguments"], added["status"]) == ("function_call", "Bash", "",
                                                                                     "in_progress")
    events += stream.end(lambda out: R.usage(3, 4))
    assert [e["type"] for e in events[-3:]] == ["response.function_call_arguments.done", "response.output_item.done",
                                                "response.completed"]
    assert events[-1]["response"]["usage"]["total_tokens"] == 7  # what Codex reads off response.completed


def test_a_failure_is_said_as_the_responses_api_says_one():
    stream = R.Stream(CODEX)
    message, code = R._failure(ValueError("Requested tokens (5000) exceed context window of 4096"))
    (event,) = stream.failed(message, code)
    # the code Codex reads as "the conversation is too long" (codex-rs is_context_window_error), a word the openai
    # client's type does not list but passes on; the event is the client's otherwise
    assert event["response"]["status"] == "failed" and event["response"]["error"] == {
        "code": "context_length_exceeded", "message": "Requested tokens (5000) exceed context window of 4096"}
    (other,) = R.Stream(CODEX).failed(*R._failure(RuntimeError("boom")))
    assert other["response"]["error"] == {"code": "server_error", "message": "boom"}
    EVENT.validate_python(other)


def test_the_recorder_keeps_a_responses_answer_as_the_chat_exchange_it_was():
    whole = R.response(CODEX, O.reply(completion("Let me run them.\n" + CALL), OFFERED))
    for stream, answer in ((False, json.dumps(whole).encode()), (True, sse([{"type": "response.completed",
                                                                              "response": whole}]))):
        ex = Exchange(id="a" * 32, route="responses", request=json.dumps({**CODEX, "stream": stream}).encode(),
                      response=answer, started=0.0, latency_ms=1.0, user_agent="codex_cli_rs/0.134.0 (Linux)")
        kept = to_recorded(ex)
        assert kept.route == "chat" and kept.client == "codex_cli_rs" and kept.finish_reason == "tool_calls"
        assert kept.request["tools"] == TOOLS and kept.request["messages"] == R.chat_request(CODEX)["messages"]
        assert kept.answer["content"] == "Let me run them."
        (call,) = kept.answer["tool_calls"]
        assert call["function"]["name"] == "Bash" and json.loads(call["function"]["arguments"]) == {
            "command": "pytest -q"}
        assert (kept.prompt_tokens, kept.completion_tokens) == (10, 5)
