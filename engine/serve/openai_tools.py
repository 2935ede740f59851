"""OpenAI tool calling on the served student: a request's `tools` and tool history reach its template as training
rendered them, and its `<tool_call>` blocks come back as `tool_calls`, whole or streamed as OpenAI streams them.

The answer's rules (README, Shipping: "From an OpenAI client"):
- A request that offers `tools` (tool_choice absent, "auto" or "required") has each block of the answer that is a valid
  call of one of them (toolcalls/schemas.block_problems: JSON, a named offered tool, arguments matching its schema)
  returned in `message.tool_calls` (`id`, `type: "function"`, `function.name`, `function.arguments` as a JSON string)
  with `finish_reason: "tool_calls"`; the text around the blocks stays `content` (trimmed; null when empty beside
  calls).
- A block that is no valid call (bad JSON, an unknown tool, arguments against the schema, unclosed, a stray closing
  tag) stays in `content` as the text the student wrote, and the finish reason is "invalid_tool_call" (INVALID) — or
  "length" when the answer was cut at max_tokens, which is why the block is unclosed.
- tool_choice "none" or naming one function, and a request without tools: llama-cpp-python's own answer, untouched.
- Streamed (`stream: true`): text goes out as `content` deltas as soon as no tag can begin in it; a block is held
  until it closes and is checked, then sent as OpenAI sends a call (a delta with index, id, type and name, then the
  arguments in fragments) or as text; the last chunk carries the finish reason, then the server sends `[DONE]`.
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from app.core.datasets.corrections import prompt_messages
from app.core.ship.serving import SERVED_MODEL
from app.core.toolcalls.convention import parse_call
from app.core.toolcalls.grammar import CLOSE, OPEN, tools_of
from app.core.toolcalls.schemas import block_problems
from engine import chat_template

INVALID = "invalid_tool_call"  # the finish reason of an answer holding a block that is no valid call
FRAGMENT = 12  # characters of a call's arguments per streamed delta
TAGS = (OPEN, CLOSE)


def accept_wire_messages() -> None:
    """Chat requests take messages as OpenAI clients send them, which llama-cpp-python's request model refuses (with a
    500): an assistant message whose `content` is null beside its `tool_calls`, content as a list of text parts in
    any role, the `developer` role. `prompt` reads them all (app/core/datasets/corrections.chat_message)."""
    from llama_cpp.server import types

    types.CreateChatCompletionRequest.model_fields["messages"].annotation = list[dict[str, Any]]
    types.CreateChatCompletionRequest.model_rebuild(force=True)


def speaks_tools(tools: Any, tool_choice: Any) -> bool:
    """Whether the answer's blocks become `tool_calls`: the request offers tools and leaves the choice to the model."""
    return bool(tools_of(tools)) and tool_choice in (None, "auto", "required")


def prompt(messages: list[dict], tools: Any, native: bool) -> list[dict]:
    """The request's messages as training rendered a conversation: its tools named in the system prompt (the
    captured sessions' "Tools: A, B. Call a tool by writing <tool_call>…" line), and — for a template without tool
    support — assistant `tool_calls` written as `<tool_call>` text, tool results as `tool` messages."""
    msgs = prompt_messages(messages, tools or [], agent_system=False)
    return msgs if native else chat_template.normalise(msgs)


def _held_back(text: str) -> int:
    """How many characters at the end of `text` could begin a tag (they wait for the next piece)."""
    for n in range(min(len(text), max(map(len, TAGS)) - 1), 0, -1):
        if any(tag.startswith(text[-n:]) for tag in TAGS):
            return n
    return 0


class Reader:
    """The student's answer read in pieces: ("text", str) once no tag can begin in it (leading and trailing
    whitespace dropped, whitespace between kept), ("call", tool call) for each block that closes as a valid call of
    the offered tools; a block that is not one comes out as its text, counted in `invalid`."""

    def __init__(self, tools: dict[str, dict | None]) -> None:
        self.tools, self.schemas = tools, {k: v for k, v in tools.items() if v}
        self.held, self.open, self.space, self.started = "", False, "", False
        self.calls, self.invalid, self.sent = 0, 0, 0  # sent: calls streamed so far

    def feed(self, piece: str) -> list[tuple[str, Any]]:
        self.held += piece
        out: list[tuple[str, Any]] = []
        while True:
            if self.open:
                end = self.held.find(CLOSE)
                if end < 0:
                    return out
                end += len(CLOSE)
                block, self.held, self.open = self.held[:end], self.held[end:], False
                out += self._block(block)
                continue
            found = [(at, tag) for tag in TAGS if (at := self.held.find(tag)) >= 0]
            if not found:
                keep = len(self.held) - _held_back(self.held)
                out += self._text(self.held[:keep])
                self.held = self.held[keep:]
                return out
            at, tag = min(found)
            if tag == OPEN:
                out += self._text(self.held[:at])
                self.held, self.open = self.held[at:], True
            else:  # a closing tag with no call open
                self.invalid += 1
                out += self._text(self.held[:at + len(CLOSE)])
                self.held = self.held[at + len(CLOSE):]

    def end(self) -> list[tuple[str, Any]]:
        """What is still held: an unclosed block (invalid) or text that turned out to begin no tag."""
        held, self.held = self.held, ""
        self.invalid += self.open
        self.open = False
        return self._text(held)

    def _text(self, text: str) -> list[tuple[str, Any]]:
        text = self.space + (text if self.started else text.lstrip())
        body = text.rstrip()
        self.space = text[len(body):] if self.started or body else ""
        if not body:
            return []
        self.started = True
        return [("text", body)]

    def _block(self, block: str) -> list[tuple[str, Any]]:
        body = block[len(OPEN):-len(CLOSE)].strip()
        try:
            problems = block_problems(body, set(self.tools), self.schemas)
        except Exception:  # noqa: BLE001 - a client's schema jsonschema cannot read: checked without it
            problems = block_problems(body, set(self.tools), {})
        call = parse_call(body) if not problems else None
        if call is None:
            self.invalid += 1
            return self._text(block)
        self.calls += 1
        return [("call", {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                          "function": {"name": call["name"],
                                       "arguments": json.dumps(call["arguments"], ensure_ascii=False)}})]

    def finish_reason(self, reason: str | None) -> str | None:
        """The answer's finish reason: INVALID with an invalid block (unless cut: "length"), "tool_calls" with calls."""
        if self.invalid:
            return reason if reason == "length" else INVALID
        return "tool_calls" if self.calls else reason


def read(text: str, tools: dict[str, dict | None]) -> tuple[list[tuple[str, Any]], Reader]:
    reader = Reader(tools)
    return reader.feed(text) + reader.end(), reader


def reply(result: dict, tools: dict[str, dict | None]) -> dict:
    """A chat completion (llama-cpp-python's) with the student's blocks as `tool_calls`."""
    choice = result["choices"][0]
    pieces, reader = read(choice["message"].get("content") or "", tools)
    content = "".join(p for kind, p in pieces if kind == "text")
    calls = [p for kind, p in pieces if kind == "call"]
    message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
    if calls:
        message["tool_calls"] = calls
    choice.update(message=message, finish_reason=reader.finish_reason(choice.get("finish_reason")))
    return result


def _chunk(head: dict, delta: dict, finish: str | None = None) -> dict:
    return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}


def _deltas(head: dict, pieces: list[tuple[str, Any]], reader: Reader) -> Iterator[dict]:
    for kind, piece in pieces:
        if kind == "text":
            yield _chunk(head, {"content": piece})
            continue
        index, args = reader.sent, piece["function"]["arguments"]
        reader.sent += 1
        yield _chunk(head, {"tool_calls": [{"index": index, "id": piece["id"], "type": "function",
                                            "function": {"name": piece["function"]["name"], "arguments": ""}}]})
        for at in range(0, len(args), FRAGMENT):
            yield _chunk(head, {"tool_calls": [{"index": index, "function": {"arguments": args[at:at + FRAGMENT]}}]})


def streamed(chunks: Iterator[dict], tools: dict[str, dict | None]) -> Iterator[dict]:
    """llama-cpp-python's chat chunks (a role delta, one content delta per token, a last chunk with the finish
    reason) as OpenAI streams an answer with tool calls."""
    reader, head, finished = Reader(tools), None, False
    for chunk in chunks:
        head = head or {k: chunk[k] for k in ("id", "object", "created", "model") if k in chunk}
        choice = (chunk.get("choices") or [{}])[0]
        delta = choice.get("delta") or {}
        if delta.get("role") and not delta.get("content"):
            yield chunk
            continue
        pieces = reader.feed(delta.get("content") or "")
        if (reason := choice.get("finish_reason")) is not None:
            pieces += reader.end()
        yield from _deltas(head, pieces, reader)
        if reason is not None:
            finished = True
            yield _chunk(head, {}, reader.finish_reason(reason))
    if not finished and head is not None:
        yield from _deltas(head, reader.end(), reader)
        yield _chunk(head, {}, reader.finish_reason("stop"))


def speaking_tools(handler: Callable, native: bool) -> Callable:
    """A chat handler whose prompt is rendered in the training convention (`prompt`) and whose answer, for a
    request that offers tools, carries the student's calls as `tool_calls` (`reply`, `streamed`). `native`: the
    template renders `tool_calls` itself (engine/render.supports_tools)."""

    def handle(*, llama, messages, tools=None, tool_choice=None, stream: bool = False, **kwargs):
        result = handler(llama=llama, messages=prompt(messages, tools, native), tools=tools, tool_choice=tool_choice,
                         stream=stream, **kwargs)
        if not speaks_tools(tools, tool_choice):
            return result
        offered = tools_of(tools)
        return streamed(result, offered) if stream else reply(result, offered)

    return handle


def models(info) -> dict:
    """GET /v1/models: the student under its stable name (SERVED_MODEL) whatever file serves it, so a client set up
    once keeps working across deployments and rollbacks; which file serves is under `nightschool`."""
    return {"object": "list", "data": [{
        "id": SERVED_MODEL, "object": "model", "created": int(info.loaded_at), "owned_by": "nightschool",
        "nightschool": {"file": info.name, "sha256": info.sha256, "quant": info.quant}}]}
