"""The Hermes text convention for tool calls (`<tool_call>{"name", "arguments"}</tool_call>`), both ways, and
whether a student's action agrees with the teacher's (the same tool calls, or the same answer)."""
from __future__ import annotations

import json
import re
from difflib import SequenceMatcher
from typing import Any

AGREE_RATIO = 0.9  # text answers this similar (difflib ratio, whitespace normalised) count as the same answer
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_THINK = re.compile(r"<think>.*?</think>", re.S)


def _text_of(content: Any) -> str:
    if isinstance(content, list):  # text content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def as_text(message: dict) -> dict:
    """{role, content} with tool calls written into the content: the one convention for templates without tool
    support (engine.chat_template renders training data with it; evaluation and export use it too)."""
    parts = [_text_of(message.get("content"))]
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


def _arguments(value: Any) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {"input": value}
    if isinstance(value, dict):
        return value
    return {} if value is None else {"input": value}


def _call(body: str) -> dict | None:
    """A Hermes tool call body -> {name, arguments}; None when it is not one (it then stays text)."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"].strip():
        return None
    return {"name": obj["name"], "arguments": _arguments(obj.get("arguments", obj.get("parameters")))}


def parse_student(text: str) -> dict:
    """The student's raw answer -> an assistant message {role, content, tool_calls?}: each well-formed
    `<tool_call>{"name": …, "arguments": {…}}</tool_call>` becomes a tool call; anything malformed stays text."""
    calls, kept, pos = [], [], 0
    for match in _TOOL_CALL.finditer(text):
        fn = _call(match.group(1).strip())
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


# --- agreement ----------------------------------------------------------------------------------------------------

def _norm_value(value: Any) -> Any:
    """JSON values compared by meaning: key order, 1 vs 1.0, surrounding whitespace of strings do not matter."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _norm_value(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_norm_value(v) for v in value)
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return value


def _calls(message: dict) -> list[tuple[str, Any]]:
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call)
        out.append(((fn.get("name") or "").strip(), _norm_value(_arguments(fn.get("arguments")))))
    return out


def _answer(message: dict) -> str:
    """The visible answer, whitespace normalised; thinking aside unless there is nothing else."""
    text = _text_of(message.get("content"))
    visible = " ".join(_THINK.sub(" ", text).split())
    return visible or " ".join(text.split())


def agrees(teacher: dict, student: dict) -> bool:
    """The same action: the same tool calls (names and arguments) in the same order; or, when neither calls a tool,
    the same text (whitespace normalised, thinking aside) or a difflib ratio of at least AGREE_RATIO."""
    mine, theirs = _calls(teacher), _calls(student)
    if mine or theirs:
        return mine == theirs
    a, b = _answer(teacher), _answer(student)
    if a == b:
        return True
    if not a or not b:
        return False
    sm = SequenceMatcher(None, a, b, autojunk=False)
    return sm.real_quick_ratio() >= AGREE_RATIO and sm.quick_ratio() >= AGREE_RATIO and sm.ratio() >= AGREE_RATIO
