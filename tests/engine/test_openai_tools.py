"""The served student's OpenAI tool calling on fixed texts: `<tool_call>` blocks become `tool_calls` (invalid ones stay
text, finish reason "invalid_tool_call"), a stream of llama-cpp-python chunks becomes OpenAI's (tool-call deltas, the
finish reason last) and assembles to the same answer, and a request's tools and tool history render through SmolLM2's
template exactly as the training renderer renders the same conversation. The llama.cpp completions here are stand-ins
(fixed texts cut into token-sized chunks); the real model answers in tests/engine/test_openai_client_smollm2.py."""
from __future__ import annotations

import json

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from app.core.datasets.convert import system_message, tools_line
from app.core.toolcalls.grammar import tools_of
from engine.serve import openai_tools as O
from engine.serve.recorder import parse_answer

TOOLS = [{"type": "function", "function": {"name": "Bash", "description": "Run a shell command", "parameters": {
             "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
         {"type": "function", "function": {"name": "Read", "parameters": {
             "type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}}}]
OFFERED = tools_of(TOOLS)
CALL = '<tool_call>{"name": "Bash", "arguments": {"command": "pytest -q"}}</tool_call>'


def completion(text: str, finish: str = "stop") -> dict:
    """A stand-in for llama-cpp-python's chat completion of `text`."""
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "nightschool",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                         "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def chunks(text: str, finish: str = "stop", size: int = 3):
    """A stand-in for llama-cpp-python's chat stream of `text`: a role delta, `size`-character content deltas (a tag
    falls across several), a last chunk with the finish reason."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "nightschool"}
    yield {**head, "choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": None, "finish_reason": None}]}
    for at in range(0, len(text), size):
        yield {**head, "choices": [{"index": 0, "delta": {"content": text[at:at + size]}, "logprobs": None,
                                    "finish_reason": None}]}
    yield {**head, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}]}


def sse(stream) -> bytes:
    return "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in stream).encode() + b"data: [DONE]\r\n\r\n"


CASES = [  # (the student's text, llama's finish reason) -> (content, [(name, arguments)], finish reason)
    ("Let me run them.\n" + CALL, "stop", "Let me run them.", [("Bash", {"command": "pytest -q"})], "tool_calls"),
    (CALL, "stop", None, [("Bash", {"command": "pytest -q"})], "tool_calls"),
    ('<tool_call>{"name": "Read", "arguments": "{\\"file_path\\": \\"a.py\\"}"}</tool_call>\n\nthen more', "stop",
     "then more", [("Read", {"file_path": "a.py"})], "tool_calls"),
    ("The capital of France is Paris.", "stop", "The capital of France is Paris.", [], "stop"),
    ("I would use a <b>tag</b> < here", "length", "I would use a <b>tag</b> < here", [], "length"),
    # not a valid call of the offered tools: the text as written, and a finish reason that says so
    ('<tool_call>{"name": "Bash", "arguments": {}}</tool_call>', "stop",
     '<tool_call>{"name": "Bash", "arguments": {}}</tool_call>', [], O.INVALID),
    ('Sure. <tool_call>{"name": "Deploy", "arguments": {}}</tool_call>', "stop",
     'Sure. <tool_call>{"name": "Deploy", "arguments": {}}</tool_call>', [], O.INVALID),
    ("<tool_call>{name: Bash}</tool_call>", "stop", "<tool_call>{name: Bash}</tool_call>", [], O.INVALID),
    ("ok </tool_call> done", "stop", "ok </tool_call> done", [], O.INVALID),
    ('<tool_call>{"name": "Bash", "arguments": {"comm', "stop", '<tool_call>{"name": "Bash", "arguments": {"comm',
     [], O.INVALID),
    ('Let me <tool_call>{"name": "Bash", "arguments": {"comm', "length",  # cut at max_tokens: "length" says why
     'Let me <tool_call>{"name": "Bash", "arguments": {"comm', [], "length"),
]


def without_finish(answer: dict, instead: str | None = "stop") -> dict:
    """The answer with the server's own finish reason replaced by one OpenAI's types name."""
    return {**answer, "choices": [{**c, "finish_reason": instead if c["finish_reason"] == O.INVALID else
                                   c["finish_reason"]} for c in answer["choices"]]}


def calls_of(message) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


@pytest.mark.parametrize("text,finish,content,calls,reason", CASES)
def test_blocks_become_tool_calls_whole_and_streamed_alike(text, finish, content, calls, reason):
    answer = O.reply(completion(text, finish), OFFERED)
    assert answer["choices"][0]["finish_reason"] == reason
    # OpenAI's own types hold it (the finish reason aside: "invalid_tool_call" is the server's word, which the client
    # passes on as it does any string; tests/engine/test_openai_client_smollm2.py reads one with the client)
    (choice,) = ChatCompletion.model_validate(without_finish(answer)).choices
    assert (choice.message.content, calls_of(choice.message)) == (content, calls)
    assert all(c.id.startswith("call_") and c.type == "function" for c in choice.message.tool_calls or [])

    for size in (1, 3, 7):  # tags and arguments cut at every place
        streamed = list(O.streamed(chunks(text, finish, size), OFFERED))
        for chunk in streamed:  # every chunk is one of OpenAI's (the finish reason aside, as above)
            ChatCompletionChunk.model_validate(without_finish(chunk, None))
        assert streamed[0]["choices"][0]["delta"] == {"role": "assistant"}
        assert streamed[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason}
        # assembled as a client (and the server's recorder) assembles a stream: the same answer as the whole one
        got = parse_answer("chat", sse(streamed), stream=True)
        assert (got.message["content"] or None, got.finish_reason) == (content, reason)
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in got.message.get("tool_calls", [])] == calls


def test_a_streamed_call_comes_as_openai_sends_one():
    streamed = list(O.streamed(chunks("Running.\n" + CALL, size=2), OFFERED))
    deltas = [c["choices"][0]["delta"] for c in streamed]
    content = [d["content"] for d in deltas if "content" in d]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert "".join(content) == "Running." and len(content) > 1  # text goes out as it comes
    assert calls[0]["index"] == 0 and calls[0]["id"].startswith("call_") and calls[0]["type"] == "function"
    assert calls[0]["function"] == {"name": "Bash", "arguments": ""}
    fragments = [c["function"]["arguments"] for c in calls[1:]]
    assert len(fragments) > 1 and all(set(c) == {"index", "function"} and c["index"] == 0 for c in calls[1:])
    assert json.loads("".join(fragments)) == {"command": "pytest -q"}


def test_two_calls_get_their_own_index_and_id():
    text = CALL + '\n<tool_call>{"name": "Read", "arguments": {"file_path": "setup.py"}}</tool_call>'
    message = O.reply(completion(text), OFFERED)["choices"][0]["message"]
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["Bash", "Read"]
    assert len({c["id"] for c in message["tool_calls"]}) == 2
    streamed = [c["choices"][0]["delta"] for c in O.streamed(chunks(text), OFFERED)]
    heads = [d["tool_calls"][0] for d in streamed if "tool_calls" in d and "id" in d["tool_calls"][0]]
    assert [(h["index"], h["function"]["name"]) for h in heads] == [(0, "Bash"), (1, "Read")]


class StandIn:
    """A stand-in for the server's inner chat handler (template, grammar, llama.cpp): it keeps what it was given and
    answers a fixed text."""

    def __init__(self, text: str) -> None:
        self.text, self.got = text, None

    def __call__(self, *, llama, messages, tools=None, tool_choice=None, stream=False, **kwargs):
        self.got = {"messages": messages, "tools": tools, "tool_choice": tool_choice, **kwargs}
        return chunks(self.text) if stream else completion(self.text)


def test_the_handler_answers_in_tool_calls_only_when_the_model_may_choose():
    for tool_choice, tools, speaks in ((None, TOOLS, True), ("auto", TOOLS, True), ("required", TOOLS, True),
                                       ("none", TOOLS, False), (None, None, False),
                                       ({"type": "function", "function": {"name": "Bash"}}, TOOLS, False)):
        inner = StandIn(CALL)
        handle = O.speaking_tools(inner, native=False)
        result = handle(llama=None, messages=[{"role": "user", "content": "test"}], tools=tools,
                        tool_choice=tool_choice, max_tokens=8)
        message = result["choices"][0]["message"]
        assert ("tool_calls" in message) is speaks and (message["content"] == CALL) is not speaks, tool_choice
        assert inner.got["tools"] == tools and inner.got["max_tokens"] == 8  # the rest reaches llama.cpp unchanged
        streamed = list(handle(llama=None, messages=[], tools=tools, tool_choice=tool_choice, stream=True))
        assert streamed[-1]["choices"][0]["finish_reason"] == ("tool_calls" if speaks else "stop")


HISTORY = [  # as an OpenAI client sends a conversation with tool calls
    {"role": "system", "content": "You are a coding agent working in this repository."},
    {"role": "user", "content": [{"type": "text", "text": "The tests fail; fix utils.py"}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "Read", "arguments": '{"file_path": "utils.py"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "def add(a, b):\n    return a - b"},
    {"role": "assistant", "content": "Found it.", "tool_calls": [
        {"id": "call_2", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "pytest"}'}}]},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "1 failed"}]},
]
AS_TRAINED = [  # the same conversation as a dataset example (datasets/convert: tools named in the system prompt)
    {"role": "system", "content": "You are a coding agent working in this repository." + tools_line(["Bash", "Read"])},
    {"role": "user", "content": "The tests fail; fix utils.py"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "Read", "arguments": {"file_path": "utils.py"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "Read", "content": "def add(a, b):\n    return a - b"},
    {"role": "assistant", "content": "Found it.", "tool_calls": [
        {"id": "call_2", "type": "function", "function": {"name": "Bash", "arguments": {"command": "pytest"}}}]},
    {"role": "tool", "tool_call_id": "call_2", "name": "Bash", "content": "1 failed"},
]


@pytest.fixture(scope="module")
def smollm2_template() -> str:
    """SmolLM2's chat template as llama.cpp reads it from the embedded GGUF (the vocabulary alone is loaded)."""
    from engine.loading import embedded_gguf
    from engine.workers import smoke

    llm = smoke.load(embedded_gguf(), n_ctx=512, vocab_only=True)
    try:
        return llm.metadata["tokenizer.chat_template"]
    finally:
        llm.close()


def test_tools_and_tool_history_render_as_training_renders_them(smollm2_template):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from engine.render import Renderer, supports_tools

    # the training renderer over SmolLM2's template (a one-word vocabulary: only the text is compared)
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"x": 0}, unk_token="x")))
    tok.chat_template = smollm2_template
    trained = Renderer(tok, "SmolLM2's template").text(AS_TRAINED, add_generation_prompt=True)

    assert not supports_tools(smollm2_template)  # so the server writes the calls as text, as training did
    served = Jinja2ChatFormatter(smollm2_template, eos_token="<|im_end|>", bos_token="<|im_start|>",
                                 add_generation_prompt=True)(messages=O.prompt(HISTORY, TOOLS, native=False),
                                                             tools=TOOLS).prompt
    assert served == trained
    assert '<|im_start|>assistant\n<tool_call>{"name": "Read", "arguments": {"file_path": "utils.py"}}</tool_call>' \
           '<|im_end|>\n<|im_start|>tool\ndef add(a, b):' in served
    assert "Tools: Bash, Read. Call a tool by writing <tool_call>" in served

    # no system message: the tools come in the agent system message every example starts with
    bare = O.prompt(HISTORY[1:2], TOOLS, native=False)
    assert bare == [system_message(["Bash", "Read"]), {"role": "user", "content": "The tests fail; fix utils.py"}]
    # a plain chat (no tools, no system message) keeps the template's own system prompt
    assert O.prompt([{"role": "user", "content": "hi"}], None, native=False) == [{"role": "user", "content": "hi"}]
