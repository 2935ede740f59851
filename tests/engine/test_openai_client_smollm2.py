"""The `openai` Python client against the real SmolLM2 GGUF served by the built-in server (started the way the app
starts it, real HTTP on loopback): /v1/models names the student `nightschool`; a tool-calling request gets a
`tool_calls` answer, and the same request streamed gets the same call in OpenAI's deltas; a call that is not valid
comes back as text with the finish reason "invalid_tool_call", which the client reads; the recorder keeps the calls.
The Responses API (what Codex CLI speaks) answers the same conversation, sent as Responses items, with the same call
as a `function_call` item, whole and streamed (`client.responses.create`), and `nightschool connect codex`'s live
check passes against it.

How the call is brought about, honestly: SmolLM2-135M-Instruct untrained seldom calls a tool from a bare request, so
the conversation shows it three earlier turns in which it called one (assistant `tool_calls` and `tool` results in
the history, which the server renders in the training convention). The invalid call is forced by a request grammar
(llama-cpp-python's `grammar` extension) that makes the model write a call missing its required argument."""
from __future__ import annotations

import json

import openai
import pytest

from app.core.experience import config
from app.core.ship import serving
from app.core.ship.connect import check, endpoint
from app.core.ship.connect.agent import RESPONSES
from engine.loading import embedded_gguf

pytestmark = pytest.mark.slow
TOOLS = [{"type": "function", "function": {"name": name, "description": what, "parameters": {
    "type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}}}
    for name, what, arg in (("Bash", "Run a shell command", "command"), ("Read", "Read a file", "file_path"))]
SHOWN = [("Run the tests.", "Bash", {"command": "pytest -q"}, "3 passed in 0.2s"),
         ("Show me setup.py.", "Read", {"file_path": "setup.py"}, "from setuptools import setup"),
         ("List the files.", "Bash", {"command": "ls"}, "README.md app.py setup.py")]
FORCED_BAD_CALL = 'root ::= "<tool_call>{\\"name\\": \\"Bash\\", \\"arguments\\": {}}</tool_call>"'


def history(task: str) -> list[dict]:
    """Earlier turns in which the assistant called a tool (as a client sends them: content null beside the calls),
    then the task."""
    out = []
    for i, (ask, name, args, result) in enumerate(SHOWN):
        out += [{"role": "user", "content": ask},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call_{i}", "type": "function",
                     "function": {"name": name, "arguments": json.dumps(args)}}]},
                {"role": "tool", "tool_call_id": f"call_{i}", "content": result}]
    return [*out, {"role": "user", "content": task}]


def as_items(messages: list[dict]) -> list[dict]:
    """The same conversation as Responses API input items, as Codex sends one."""
    out = []
    for m in messages:
        if m["role"] == "tool":
            out.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        elif m.get("tool_calls"):
            out += [{"type": "function_call", "call_id": c["id"], **c["function"]} for c in m["tool_calls"]]
        else:
            out.append({"type": "message", "role": m["role"], "content": [{"type": "input_text", "text": m["content"]}]})
    return out


@pytest.fixture
def client(store):
    """The real SmolLM2 GGUF served in this test's data dir (recording on), and an OpenAI client pointed at it."""
    config.set_buffer(store, "enabled", True)
    state = serving.start(serving.Model(name="SmolLM2-135M-Instruct.Q4_1", path=str(embedded_gguf()), sha256=""),
                          port=0)
    try:
        yield openai.OpenAI(base_url=state["url"], api_key=serving.api_key(), max_retries=0, timeout=120)
    finally:
        serving.stop()


def recorded(raw) -> dict:
    code, body = serving.request("GET", f"/nightschool/experience/{raw.headers['x-nightschool-experience']}")
    assert code == 200, body
    return body


def test_openai_client_calls_tools_whole_and_streamed(client):
    (model,) = client.models.list().data
    assert model.id == serving.SERVED_MODEL == "nightschool"
    assert model.nightschool["file"] == "SmolLM2-135M-Instruct.Q4_1"  # which file serves, beside the stable name

    ask = dict(model=model.id, messages=history("Run git status."), tools=TOOLS, max_tokens=48, temperature=0)
    raw = client.chat.completions.with_raw_response.create(**ask)
    (choice,) = raw.parse().choices
    assert choice.finish_reason == "tool_calls", choice
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "Bash"
    assert json.loads(call.function.arguments) == {"command": "git status"}
    assert not choice.message.content
    kept = recorded(raw)  # the recorder keeps the answer as the client got it, and finds nothing wrong with it
    assert kept["answer"]["tool_calls"] == [call.model_dump()] and kept["finish_reason"] == "tool_calls"
    assert kept["state"] != "flagged", kept["reasons"]

    # The same request streamed: the call arrives in OpenAI's deltas (index, id, name, then argument fragments).
    with client.chat.completions.with_streaming_response.create(**ask, stream=True) as streamed:
        chunks = list(streamed.parse())
        exp_id = streamed.headers["x-nightschool-experience"]
    pieces = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert pieces[0].index == 0 and pieces[0].id.startswith("call_") and pieces[0].function.name == "Bash"
    assert len(pieces) > 2 and all(p.index == 0 and p.id is None for p in pieces[1:])
    assert json.loads("".join(p.function.arguments for p in pieces)) == json.loads(call.function.arguments)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    code, kept = serving.request("GET", f"/nightschool/experience/{exp_id}")
    assert code == 200 and kept["answer"]["tool_calls"][0]["function"] == call.function.model_dump()

    # A question the student answers in words stays content, even with tools offered.
    words = {**ask, "messages": history("What is 2 + 2? Answer in words.")}
    (choice,) = client.chat.completions.create(**words).choices
    assert choice.finish_reason in ("stop", "length") and choice.message.content and not choice.message.tool_calls

    # A call that is not valid (Bash without its required command, forced by a request grammar): text, and a finish
    # reason that says so, which the client reads whole and streamed.
    ask = dict(model=serving.SERVED_MODEL, messages=[{"role": "user", "content": "List the files."}], tools=TOOLS,
               max_tokens=32, temperature=0, extra_body={"grammar": FORCED_BAD_CALL})
    (choice,) = client.chat.completions.create(**ask).choices
    assert choice.finish_reason == "invalid_tool_call" and not choice.message.tool_calls
    assert choice.message.content == '<tool_call>{"name": "Bash", "arguments": {}}</tool_call>'
    chunks = list(client.chat.completions.create(**ask, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == choice.message.content
    assert chunks[-1].choices[0].finish_reason == "invalid_tool_call"

    responses_api(client, [{"type": "function", **t["function"]} for t in TOOLS])


def responses_api(client, tools: list[dict]) -> None:
    """The Responses API on the real model: the conversation above as Codex sends it, whole and streamed."""
    ask = dict(model=serving.SERVED_MODEL, input=as_items(history("Run git status.")), tools=tools,
               max_output_tokens=48, temperature=0, store=False)
    raw = client.responses.with_raw_response.create(**ask)
    answer = raw.parse()
    (call,) = answer.output
    assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", "Bash", {"command": "git status"})
    assert call.call_id.startswith("call_") and answer.status == "completed"
    assert answer.usage.input_tokens > 100 and 0 < answer.usage.output_tokens <= 48
    kept = recorded(raw)  # kept as the chat exchange it was, the call as a chat tool call
    assert kept["route"] == "chat" and kept["answer"]["tool_calls"][0]["function"]["name"] == "Bash"

    with client.responses.with_streaming_response.create(**ask, stream=True) as streamed:
        events = list(streamed.parse())
        exp_id = streamed.headers["x-nightschool-experience"]
    assert [e.type for e in events[:3]] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert events[-1].type == "response.completed" and events[-1].response.usage.total_tokens > 100
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(arguments) == {"command": "git status"}
    (done,) = events[-1].response.output
    assert (done.name, done.arguments) == ("Bash", arguments)
    code, kept = serving.request("GET", f"/nightschool/experience/{exp_id}")
    assert code == 200 and json.loads(kept["answer"]["tool_calls"][0]["function"]["arguments"]) == {
        "command": "git status"}

    checked = check.live(endpoint.current(), RESPONSES)  # what `nightschool connect codex` checks
    assert checked.ok, checked.why

    # A conversation longer than the context (refused before any token is evaluated): said as the Responses API says
    # it, with the code Codex reads as "too long" when streamed.
    long = {**ask, "input": "word " * 5000}
    with pytest.raises(openai.BadRequestError, match="exceed context window"):
        client.responses.create(**long)
    (failed,) = [e for e in client.responses.create(**long, stream=True) if e.type == "response.failed"]
    assert failed.response.error.code == "context_length_exceeded"
