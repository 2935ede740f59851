"""The Hermes text convention for tool calls (`<tool_call>{"name", "arguments"}</tool_call>`): written, parsed, found
in a text, and the system message's tool list."""
from __future__ import annotations

import json
import re
from typing import Any

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
UNCLOSED_CALL = re.compile(r"<tool_call>.*", re.S)
# How the system message of every example and evaluation prompt states the convention (datasets.convert writes it).
TOOL_CONVENTION = ('Call a tool by writing <tool_call>{"name": "...", "arguments": {...}}</tool_call>; its result '
                   "comes back as a tool message.")
_TOOLS_LINE = re.compile(r"Tools: ([^\n]+?)\. Call a tool by writing ")
_TOOLS_BLOCK = re.compile(r"<tools>(.*?)</tools>", re.S)


def text_of(content: Any) -> str:
    if isinstance(content, list):  # text content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def as_text(message: dict) -> dict:
    """{role, content} with tool calls written into the content: the one convention for templates without tool
    support (engine.chat_template renders training data with it; evaluation and export use it too)."""
    parts = [text_of(message.get("content"))]
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                pass
        parts.append("<tool_call>" + json.dumps({"name": fn.get("name"), "arguments": args}) + "</tool_call>")
    return {"role": message["role"], "content": "\n".join(p for p in parts if p)}


def arguments_of(value: Any) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {"input": value}
    if isinstance(value, dict):
        return value
    return {} if value is None else {"input": value}


def parse_call(body: str) -> dict | None:
    """A Hermes tool call body -> {name, arguments}; None when it is not one (it then stays text)."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"].strip():
        return None
    return {"name": obj["name"], "arguments": arguments_of(obj.get("arguments", obj.get("parameters")))}


def parse_student(text: str) -> dict:
    """The student's raw answer -> an assistant message {role, content, tool_calls?}: each well-formed
    `<tool_call>{"name": …, "arguments": {…}}</tool_call>` becomes a tool call; anything malformed stays text."""
    calls, kept, pos = [], [], 0
    for match in TOOL_CALL.finditer(text):
        fn = parse_call(match.group(1).strip())
        if fn is None:
            continue
        kept.append(text[pos:match.start()])
        pos = match.end()
        calls.append({"id": f"call_{len(calls)}", "type": "function", "function": fn})
    kept.append(text[pos:])
    msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(p.strip() for p in kept if p.strip())}
    if calls:
        msg["tool_calls"] = calls
    return msg


def blocks(text: str) -> tuple[list[str], int]:
    """Closed block bodies, and how many blocks were attempted (an unclosed or stray tag counts as one)."""
    bodies = TOOL_CALL.findall(text)
    return bodies, max(len(bodies), text.count("<tool_call>"), text.count("</tool_call>"))


def cut_call(text: str) -> dict | None:
    """The call an answer ends inside, unclosed (the answer limit cut it): {"name", "arguments"} with only the values
    that were complete when it was cut (an unfinished string, or the name itself, is left out); None when the answer
    does not end inside a `<tool_call>`."""
    from pydantic_core import from_json

    last = text.rfind("<tool_call>")
    if last < 0 or "</tool_call>" in text[last:]:
        return None
    body = text[last + len("<tool_call>"):].strip()
    try:
        obj = from_json(body, allow_partial=True) if body else {}
    except ValueError:  # not even the beginning of a JSON object
        return {"arguments": {}}
    if not isinstance(obj, dict):
        return {"arguments": {}}
    args = obj.get("arguments", obj.get("parameters"))
    out = {"arguments": args if isinstance(args, dict) else {}}
    if isinstance(obj.get("name"), str) and obj["name"].strip():
        out["name"] = obj["name"].strip()
    return out


def strip_calls(text: str) -> str:
    """The text with every tool-call block (closed, unclosed or a stray closing tag) blanked out."""
    return UNCLOSED_CALL.sub(" ", TOOL_CALL.sub(" ", text)).replace("</tool_call>", " ")


def message_calls(message: dict) -> list[dict]:
    """[{name, arguments}] of an assistant message: structured `tool_calls` or Hermes text."""
    parsed = parse_student(as_text({**message, "role": "assistant"})["content"])
    return [c["function"] for c in parsed.get("tool_calls", [])]


def tools_in_system(content: str) -> list[str]:
    """Tool names in a system message: the "Tools: A, B. Call a tool …" line, or a Hermes <tools> JSON block."""
    line = _TOOLS_LINE.search(content)
    if line:
        return [t.strip() for t in line.group(1).split(", ") if t.strip()]
    names = []
    for block in _TOOLS_BLOCK.findall(content):
        for row in filter(str.strip, block.splitlines()):
            try:
                obj = json.loads(row)
            except json.JSONDecodeError:
                continue
            fn = obj.get("function", obj) if isinstance(obj, dict) else {}
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                names.append(fn["name"])
    return names
