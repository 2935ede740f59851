"""The OpenAI Responses API on the served student (`POST /v1/responses`, all Codex CLI speaks): a request becomes the
chat request the chat route answers, and its chat answer (the student's calls read by openai_tools) comes back as
`output` items, whole or as the Responses API's streaming events.

The translation (what Codex sends: codex-rs `ResponsesApiRequest`, read from its source):
- `instructions` becomes the system message; `input` (a string: one user message) gives, item by item: `message`
  (any role, text parts as they are: the chat route reads them) as that message, `function_call` as an assistant
  `tool_calls` entry (joined to the assistant message just before it), `function_call_output` as a `tool` message
  with its `call_id`; `custom_tool_call` (a freeform tool's call) and its output likewise, its input as
  `{"input": …}`. Other items (`reasoning`: another model's, often encrypted; `web_search_call`, `local_shell_call`,
  `item_reference`, …) are not rendered: the student neither reads nor writes them.
- `tools`: the `function` ones (name, description, parameters at the top level) as chat tools; other kinds
  (`local_shell`, `web_search`, `custom`, …) are dropped: the student calls functions with JSON arguments only.
  `tool_choice` likewise; `max_output_tokens` is `max_tokens`; `temperature`, `top_p`, `user` and llama-cpp-python's
  own extensions (`grammar`, `seed`, …) pass as on the chat route. `store`, `include`, `reasoning`, `text`,
  `parallel_tool_calls` (the student's answer ends at its first call), `prompt_cache_key` … are ignored;
  `previous_response_id` is refused (this server keeps no responses: send the whole conversation, as Codex does).
- The answer: the student's words as a `message` item (`output_text`), each valid call as a `function_call` item
  (`call_id`, `name`, `arguments` a JSON string); an invalid block stays text. Status "completed", or "incomplete"
  (`incomplete_details.reason: "max_output_tokens"`) when cut at the limit; the chat finish reason (e.g.
  "invalid_tool_call") is under `nightschool.finish_reason`. Streamed: `response.created`, `response.in_progress`,
  per item `response.output_item.added`, its text deltas (`content_part`, `output_text` delta/done) or arguments
  (`function_call_arguments` delta/done) and `response.output_item.done`, then `response.completed` (or
  `.incomplete`) with the whole response and its usage; a failure is `response.failed` (code
  "context_length_exceeded" when the conversation does not fit, which Codex reads as such).
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Any

from app.core.base.errors import Explained
from app.core.ship.serving import SERVED_MODEL
from app.core.toolcalls.convention import as_text

ROUTE = "/v1/responses"
PASSED = ("temperature", "top_p", "user", "seed", "stop", "grammar", "top_k", "min_p", "repeat_penalty",
          "presence_penalty", "frequency_penalty")  # the same meaning on the chat route
CALLS, RESULTS = ("function_call", "custom_tool_call"), ("function_call_output", "custom_tool_call_output")
NO_PARAMETERS = {"type": "object", "properties": {}}


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _call(item: dict) -> dict:
    """A call item as a chat `tool_calls` entry."""
    args = (json.dumps({"input": item.get("input", "")}) if item["type"] == "custom_tool_call"
            else item.get("arguments") or "{}")
    return {"id": item.get("call_id") or item.get("id") or "call_0", "type": "function",
            "function": {"name": item.get("name") or "unknown", "arguments": args}}


def messages(instructions: Any, items: Any) -> list[dict]:
    """The request's instructions and input items as chat messages (see the module's docstring)."""
    out: list[dict] = [{"role": "system", "content": instructions}] if instructions else []
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    if not isinstance(items, list):
        raise Explained("the request's input is neither text nor a list of items",
                        fix="send input as a string or a list of message / function_call items")
    for item in items:
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            out.append({"role": item.get("role", "user"), "content": item.get("content") or ""})
        elif kind in CALLS:
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(_call(item))
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [_call(item)]})
        elif kind in RESULTS:
            out.append({"role": "tool", "tool_call_id": item.get("call_id") or "", "content": item.get("output") or ""})
        elif kind is None:
            raise Explained(f"an input item is not an object: {json.dumps(item)[:80]}")
    return out


def chat_tools(tools: Any) -> list[dict]:
    """The request's function tools in the chat shape (other tool kinds dropped)."""
    return [{"type": "function", "function": {k: v for k, v in (("name", t["name"]), ("description",
             t.get("description")), ("parameters", t.get("parameters") or NO_PARAMETERS)) if v is not None}}
            for t in tools or [] if isinstance(t, dict) and t.get("type") == "function" and t.get("name")]


def chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict):  # {"type": "function", "name": X}; another kind (a hosted tool) leaves it "auto"
        return {"type": "function", "function": {"name": choice["name"]}} if choice.get("name") else "auto"
    return choice


def chat_request(body: dict) -> dict:
    """The chat completions request a Responses request is answered as."""
    if not isinstance(body, dict):
        raise Explained("the request body is not a JSON object")
    if body.get("previous_response_id"):
        raise Explained("previous_response_id cannot be followed", why="this server keeps no responses",
                        fix="send the whole conversation in input (store: false), as Codex does")
    chat = {k: body[k] for k in PASSED if body.get(k) is not None}
    chat.update(model=body.get("model") or SERVED_MODEL, messages=messages(body.get("instructions"), body.get("input")),
                stream=bool(body.get("stream")))
    if tools := chat_tools(body.get("tools")):
        chat["tools"] = tools
        if body.get("tool_choice") is not None:
            chat["tool_choice"] = chat_tool_choice(body["tool_choice"])
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    return chat


def _part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(text: str, item_id: str = "", status: str = "completed") -> dict:
    return {"id": item_id or _id("msg"), "type": "message", "role": "assistant", "status": status,
            "content": [_part(text)] if status == "completed" else []}


def call_item(call: dict, item_id: str = "", status: str = "completed") -> dict:
    fn = call["function"]
    return {"id": item_id or _id("fc"), "type": "function_call", "status": status, "call_id": call["id"],
            "name": fn["name"], "arguments": fn["arguments"] if status == "completed" else ""}


def output_items(message: dict) -> list[dict]:
    """A chat answer's message as output items: its words (if any, or nothing else), then each call."""
    content, calls = message.get("content") or "", message.get("tool_calls") or []
    return ([message_item(content)] if content or not calls else []) + [call_item(c) for c in calls]


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + completion_tokens}


def envelope(body: dict, resp_id: str, created: int, output: list[dict], status: str = "completed",
             finish: str | None = None, used: dict | None = None) -> dict:
    """The response object (what the request asked echoed back, as OpenAI does)."""
    if finish == "length":
        status = "incomplete"
    return {"id": resp_id, "object": "response", "created_at": created, "status": status, "model": SERVED_MODEL,
            "output": output, "usage": used, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": body.get("instructions"), "tools": body.get("tools") or [],
            "tool_choice": body.get("tool_choice") or "auto",
            "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
            "temperature": body.get("temperature"), "top_p": body.get("top_p"),
            "max_output_tokens": body.get("max_output_tokens"), "previous_response_id": None, "store": False,
            "metadata": body.get("metadata") or {}, "nightschool": {"finish_reason": finish}}


def response(body: dict, result: dict) -> dict:
    """A chat completion (tool calls already read) as the Responses API answers."""
    choice, used = result["choices"][0], result.get("usage") or {}
    return envelope(body, _id("resp"), int(time.time()), output_items(choice["message"]),
                    finish=choice.get("finish_reason"),
                    used=usage(int(used.get("prompt_tokens") or 0), int(used.get("completion_tokens") or 0)))


class Stream:
    """A chat stream (openai_tools.streamed's chunks, or llama-cpp-python's without tools) as the Responses API's
    events, each a dict with its `type` and `sequence_number`; `output` holds the finished items."""

    def __init__(self, body: dict) -> None:
        self.body, self.id, self.created = body, _id("resp"), int(time.time())
        self.seq, self.output, self.finish = 0, [], None
        self.open: dict | None = None  # the item being written: {"item": …, "at": index, "text": what it holds}

    def event(self, kind: str, **fields) -> dict:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq - 1, **fields}

    def start(self) -> list[dict]:
        head = envelope(self.body, self.id, self.created, [], status="in_progress")
        return [self.event("response.created", response=head), self.event("response.in_progress", response=head)]

    def feed(self, chunk: dict) -> list[dict]:
        choice = (chunk.get("choices") or [{}])[0]
        delta, out = choice.get("delta") or {}, []
        if delta.get("content"):
            out += self._text(delta["content"])
        for call in delta.get("tool_calls") or []:
            if call.get("id"):  # a call begins: its name, then its arguments in fragments
                out += self._close() + self._begin(call_item(call, status="in_progress"))
            elif self.open and self.open["item"]["type"] == "function_call":
                out += self._delta("response.function_call_arguments.delta", call["function"].get("arguments", ""))
        self.finish = choice.get("finish_reason") or self.finish
        return out

    def end(self, measure) -> list[dict]:
        """The last events: the open item done (an empty answer is an empty message), the response with its usage
        (`measure(output items)`)."""
        out = ([] if self.output or self.open else self._text("")) + self._close()
        done = envelope(self.body, self.id, self.created, self.output, finish=self.finish or "stop",
                        used=measure(self.output))
        return out + [self.event(f"response.{done['status']}", response=done)]

    def failed(self, message: str, code: str) -> list[dict]:
        failed = {**envelope(self.body, self.id, self.created, self.output, status="failed"),
                  "error": {"code": code, "message": message}}
        return [self.event("response.failed", response=failed)]

    def _begin(self, item: dict) -> list[dict]:
        self.open = {"item": item, "at": len(self.output), "text": ""}
        out = [self.event("response.output_item.added", output_index=self.open["at"], item=item)]
        if item["type"] == "message":
            out.append(self.event("response.content_part.added", item_id=item["id"], output_index=self.open["at"],
                                  content_index=0, part=_part("")))
        return out

    def _delta(self, kind: str, text: str) -> list[dict]:
        self.open["text"] += text
        where = {"item_id": self.open["item"]["id"], "output_index": self.open["at"]}
        if kind == "response.output_text.delta":
            where.update(content_index=0, logprobs=[])
        return [self.event(kind, **where, delta=text)] if text else []

    def _text(self, text: str) -> list[dict]:
        out = [] if self.open and self.open["item"]["type"] == "message" else (
            self._close() + self._begin(message_item("", status="in_progress")))
        return out + self._delta("response.output_text.delta", text)

    def _close(self) -> list[dict]:
        if self.open is None:
            return []
        item, at, text = self.open["item"], self.open["at"], self.open["text"]
        self.open, where = None, {"item_id": item["id"], "output_index": at}
        if item["type"] == "message":
            done = message_item(text, item["id"])
            out = [self.event("response.output_text.done", **where, content_index=0, text=text, logprobs=[]),
                   self.event("response.content_part.done", **where, content_index=0, part=_part(text))]
        else:
            done = {**item, "status": "completed", "arguments": text}
            out = [self.event("response.function_call_arguments.done", **where, name=item["name"], arguments=text)]
        self.output.append(done)
        return out + [self.event("response.output_item.done", output_index=at, item=done)]


def chat_message(items: list[dict]) -> dict:
    """Output items as the assistant's chat message: the words as content, the calls as tool_calls."""
    text = "".join(p.get("text", "") for i in items if i.get("type") == "message" for p in i.get("content") or [])
    message: dict[str, Any] = {"role": "assistant", "content": text}
    calls = [{"id": i["call_id"], "type": "function", "function": {"name": i["name"], "arguments": i["arguments"]}}
             for i in items if i.get("type") == "function_call"]
    if calls:
        message["tool_calls"] = calls
    return message


def answer_of(body: bytes, stream: bool) -> tuple[dict, str, int, int]:
    """What the recorder keeps of a Responses answer (JSON, or the SSE stream's last response): the assistant's chat
    message, the finish reason, input and output tokens."""
    if stream:
        events = [json.loads(line[5:]) for line in body.decode("utf-8").splitlines() if line.startswith("data:")]
        final = [e["response"] for e in events if e.get("type") in ("response.completed", "response.incomplete")]
        data = final[-1] if final else {}
    else:
        data = json.loads(body)
    used = data.get("usage") or {}
    return (chat_message(data.get("output") or []), (data.get("nightschool") or {}).get("finish_reason") or "",
            int(used.get("input_tokens") or 0), int(used.get("output_tokens") or 0))


def streamed_usage(llama, output: list[dict]) -> dict:
    """A streamed answer's usage (llama-cpp-python streams none): its output as the student wrote it, tokenized, and
    the rest of the context the model holds now as the input."""
    text = as_text(chat_message(output))["content"]
    written = len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)) if text else 0
    return usage(max(int(llama.n_tokens) - written, 0), written)


def _failure(exc: Exception) -> tuple[str, str]:
    """(message, code) of a generation that failed: a conversation too long for the context is said as such."""
    message = str(exc) or type(exc).__name__
    return message, "context_length_exceeded" if "context window" in message else "server_error"


def route(app, auth: list) -> None:
    """POST /v1/responses behind the API key: the request checked and translated, then answered by the chat handler
    under llama-cpp-python's request locks (no other completion runs meanwhile; a stream holds them to its end)."""
    import contextlib

    import llama_cpp.server.app as server_app
    from fastapi import Body
    from fastapi.responses import JSONResponse
    from llama_cpp.server.types import CreateChatCompletionRequest
    from pydantic import ValidationError
    from sse_starlette.sse import EventSourceResponse
    from starlette.concurrency import iterate_in_threadpool, run_in_threadpool

    locked = contextlib.asynccontextmanager(server_app.get_llama_proxy)

    async def events(body: dict, chat, kwargs: dict):
        stream = Stream(body)
        for event in stream.start():
            yield {"event": event["type"], "data": json.dumps(event)}
        async with locked() as proxy:
            llama = server_app.prepare_request_resources(chat, proxy, chat.model, kwargs)
            try:
                chunks = await run_in_threadpool(llama.create_chat_completion, **kwargs)
                async for chunk in iterate_in_threadpool(chunks):
                    for event in stream.feed(chunk):
                        yield {"event": event["type"], "data": json.dumps(event)}
                last = await run_in_threadpool(stream.end, lambda output: streamed_usage(llama, output))
            except Exception as exc:  # noqa: BLE001 - said to the client as the Responses API says a failure
                last = stream.failed(*_failure(exc))
        for event in last:
            yield {"event": event["type"], "data": json.dumps(event)}

    @app.post(ROUTE, dependencies=auth)
    async def create_response(body: Any = Body(...)):  # any JSON: chat_request says what it cannot answer
        try:
            chat = CreateChatCompletionRequest(**chat_request(body))
        except (Explained, ValidationError, TypeError) as exc:
            return _refusal(400, f"not a Responses API request this server answers: {exc}", "invalid_request_error")
        kwargs = chat.model_dump(exclude={"n", "logit_bias_type", "user", "min_tokens"})
        if chat.stream:
            return EventSourceResponse(events(body, chat, kwargs))
        async with locked() as proxy:
            llama = server_app.prepare_request_resources(chat, proxy, chat.model, kwargs)
            try:
                result = await run_in_threadpool(llama.create_chat_completion, **kwargs)
            except ValueError as exc:  # a conversation too long is the client's to shorten; anything else is ours
                message, code = _failure(exc)
                if code != "context_length_exceeded":
                    raise
                return _refusal(400, message, code)
        return response(body, result)

    def _refusal(status: int, message: str, code: str):
        """A refused request as OpenAI's API says one (the `openai` client and Codex read its message)."""
        return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": code}}, status)
