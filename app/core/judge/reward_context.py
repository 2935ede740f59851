"""What an RL completion is judged against (RewardContext): the teacher's next step, the state the context ends in."""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from app.core.toolcalls.actions import call_path, is_exploratory
from app.core.toolcalls.convention import as_text, message_calls, parse_student, tools_in_system

_ERROR_START = re.compile(r"^\s*(?:\[error\]|<tool_use_error>|(?:error|fatal|exception)\b[:\s!])", re.I)
_ERROR_HEAD = re.compile(r"traceback \(most recent call last\)|command not found|no such file or directory|"
                         r"permission denied|exit(?:ed with)? (?:code|status):? *-?[1-9]|"
                         r"\"?exit_code\"?\s*[:=]\s*-?[1-9]", re.I)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ("" if content is None else json.dumps(content))


def exploration_level(count: int) -> str:
    """The exploration depth of one step: minimal (0-1 exploratory calls), moderate (2-3), thorough (4+)."""
    return "minimal" if count <= 1 else "moderate" if count <= 3 else "thorough"


def is_error_result(message: dict) -> bool:
    """A tool result that reports a failure: `is_error`, convert's "[error]" prefix, Claude's <tool_use_error>, an
    "Error:"/"fatal:" start, a traceback, a non-zero exit code (looked for in the head and the tail only, so a file
    that merely contains the word is not an error)."""
    parts = message.get("content") if isinstance(message.get("content"), list) else []
    if message.get("is_error") or any(isinstance(p, dict) and p.get("is_error") for p in parts):
        return True
    text = _text(message.get("content"))
    return bool(_ERROR_START.search(text) or _ERROR_HEAD.search(text[:400]) or _ERROR_HEAD.search(text[-200:]))


def _tool_names(tools: list) -> list[str]:
    out = []
    for t in tools:
        fn = t.get("function", t) if isinstance(t, dict) else {"name": t}
        if isinstance(fn.get("name"), str) and fn["name"].strip():
            out.append(fn["name"].strip())
    return out


def _failure(context: list[dict]) -> tuple[bool, dict | None, str]:
    """(the context ends in a failed tool result, the call that failed, the error's text) over its trailing results."""
    tail = []
    for msg in reversed(context):
        if msg.get("role") != "tool":
            break
        tail.append(msg)
    failed = next((m for m in tail if is_error_result(m)), None)
    if failed is None:
        return False, None, ""
    last = next((m for m in reversed(context) if m.get("role") == "assistant"), {})
    calls = last.get("tool_calls") or []
    match = [c for c in calls if c.get("id") and c.get("id") == failed.get("tool_call_id")]
    chosen = match[0] if match else calls[0] if len(calls) == 1 else None
    call = (message_calls({"tool_calls": [chosen]}) or [None])[0] if chosen else None
    return True, call, _text(failed.get("content"))[:500]


@dataclass
class RewardContext:
    """What a completion is judged against. `tools` empty = unknown (any name allowed). `teacher_exploration`: the
    exploratory calls in the teacher's next step (a completion is one step, so one step is what it can match); None =
    counted from `teacher_calls`. `seen_paths`: file paths the context's calls already touched (read before edit)."""

    tools: list[str] = field(default_factory=list)
    teacher_calls: list[dict] = field(default_factory=list)
    teacher_text: str = ""
    teacher_exploration: int | None = None
    after_error: bool = False
    failed_call: dict | None = None
    error_text: str = ""
    seen_paths: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.teacher_exploration is None:
            self.teacher_exploration = sum(is_exploratory(c) for c in self.teacher_calls)

    @classmethod
    def from_messages(cls, context: list[dict], teacher: dict, tools: list | None = None) -> RewardContext:
        """From OpenAI-style chat messages ending right before the teacher's assistant message. `tools` (names or
        OpenAI tool dicts) overrides the names listed in the system message."""
        system = next((m for m in context if m.get("role") == "system"), None)
        names = _tool_names(tools) if tools is not None else tools_in_system(_text((system or {}).get("content")))
        teacher_msg = parse_student(as_text({**teacher, "role": "assistant"})["content"])
        after_error, failed_call, error_text = _failure(context)
        paths = [p for m in context if m.get("role") == "assistant" for c in message_calls(m) if (p := call_path(c))]
        return cls(tools=names, teacher_calls=[c["function"] for c in teacher_msg.get("tool_calls", [])],
                   teacher_text=teacher_msg["content"], after_error=after_error, failed_call=failed_call,
                   error_text=error_text, seen_paths=sorted(set(paths)))

    def to_row(self) -> dict:
        """JSON-able; store `json.dumps(ctx.to_row())` in the dataset (Arrow would merge dict columns' schemas)."""
        return asdict(self)

    @classmethod
    def from_row(cls, row: dict | str) -> RewardContext:
        data = json.loads(row) if isinstance(row, str) else dict(row)
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})
