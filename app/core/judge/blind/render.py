"""What a person reads of a blind trial, pure: an answer as its text and tool calls (the tool's name, its arguments as
key → value, long values shortened, code-like ones as code; never the raw `<tool_call>` JSON), a context as its last
turns with long tool results cut as the datasets cut them (datasets/shorten.clip). The terminal and the window draw
from it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from app.core.datasets.shorten import clip
from app.core.judge.records import JudgeError
from app.core.toolcalls.convention import TOOL_CALL, UNCLOSED_CALL, as_text, parse_call, text_of, tools_in_system

VALUE_CHARS = 600  # an argument's value longer than this is cut, head and tail kept
MESSAGE_CHARS = 1500  # a tool result or user message of the context longer than this is cut
LAST_MESSAGES = 8  # the context's messages shown (the last user message is always among them)
CODE_KEYS = {"command", "cmd", "code", "content", "new_string", "old_string", "new_str", "old_str", "patch", "diff",
             "script", "pattern", "query", "edits", "input"}  # values shown as code whatever their length


class BlindError(JudgeError):
    """A blind test that cannot be drawn, shown or answered: what, why, what to do."""


@dataclass(frozen=True)
class Arg:
    """One argument of a tool call: its key, its value as text (cut when long: `cut` characters), and whether it
    reads as code (a command, an edit, several lines, a structured value)."""

    key: str
    value: str
    code: bool = False
    cut: int = 0


@dataclass(frozen=True)
class Part:
    """A piece of an answer or message: text, a tool call (tool + args), or a tool call that does not parse (`text`
    is what was written between the tags)."""

    kind: Literal["text", "call", "broken"]
    text: str = ""
    tool: str = ""
    args: tuple[Arg, ...] = ()


@dataclass(frozen=True)
class Turn:
    """One message of the context as shown: its role, its parts, the characters cut from it."""

    role: str
    parts: tuple[Part, ...]
    cut: int = 0


@dataclass(frozen=True)
class ContextView:
    """A context as shown: the last turns, how many messages came before them, the tools it offered."""

    turns: tuple[Turn, ...]
    earlier: int = 0
    tools: tuple[str, ...] = ()


def _value(key: str, value: Any) -> Arg:
    if isinstance(value, str):
        text, code = value, key.lower() in CODE_KEYS or "\n" in value.strip()
    else:
        text = json.dumps(value, ensure_ascii=False, indent=1 if isinstance(value, (dict, list)) else None)
        code = isinstance(value, (dict, list)) or key.lower() in CODE_KEYS
    short = clip(text, VALUE_CHARS)
    return Arg(key, short, code, len(text) - len(short))


def call_part(call: dict) -> Part:
    """A parsed call ({name, arguments}) as a part: its arguments in the order written."""
    args = call.get("arguments")
    args = args if isinstance(args, dict) else {"input": args}
    return Part("call", tool=str(call.get("name") or "?"), args=tuple(_value(str(k), v) for k, v in args.items()))


def _text(piece: str) -> list[Part]:
    """Text between calls; an unclosed `<tool_call>` at its end is a broken call, a stray closing tag dropped."""
    piece = piece.replace("</tool_call>", "")
    tail = UNCLOSED_CALL.search(piece)
    head = piece[:tail.start()] if tail else piece
    out = [Part("text", text=head.strip())] if head.strip() else []
    if tail:
        out.append(Part("broken", text=clip(tail.group(0)[len("<tool_call>"):].strip(), VALUE_CHARS)))
    return out


def answer(text: str) -> tuple[Part, ...]:
    """An answer's raw text (Hermes convention) as parts, in the order written: text, each `<tool_call>` block as a
    call (or broken, when it does not parse)."""
    parts: list[Part] = []
    pos = 0
    for match in TOOL_CALL.finditer(text or ""):
        parts += _text(text[pos:match.start()])
        call = parse_call(match.group(1).strip())
        parts.append(call_part(call) if call else Part("broken", text=clip(match.group(1).strip(), VALUE_CHARS)))
        pos = match.end()
    parts += _text((text or "")[pos:])
    return tuple(parts)


def _turn(message: dict) -> Turn:
    role = str(message.get("role") or "?")
    if role == "assistant":
        return Turn(role, answer(as_text(message)["content"]))
    content = text_of(message.get("content"))
    short = clip(content, MESSAGE_CHARS)
    return Turn(role, (Part("text", text=short),) if short.strip() else (), len(content) - len(short))


def context(messages: list[dict], last: int = LAST_MESSAGES) -> ContextView:
    """The context as a person is shown it: its last `last` messages (the last user message among them: the task),
    the system message's tools; BlindError when it has nothing to show."""
    system = [m for m in messages if m.get("role") == "system"]
    rest = [m for m in messages if m.get("role") != "system"]
    turns = [_turn(m) for m in rest]
    if not any(t.parts for t in turns):
        raise BlindError("this context is empty: no message before the next action has any text or tool call",
                         why="a person cannot judge an answer to nothing",
                         fix="draw another blind test; the held-out set's builds keep only sessions with content")
    users = [i for i, m in enumerate(rest) if m.get("role") == "user"]
    start = max(0, len(rest) - last)
    shown = list(range(start, len(rest)))
    if users and users[-1] < start:
        shown = [users[-1], *range(start + 1, len(rest))]  # the task, then the last turns
    tools = tuple(t for m in system for t in tools_in_system(text_of(m.get("content"))))
    return ContextView(tuple(turns[i] for i in shown), len(rest) - len(shown), tools)


# --- as plain text (the terminal) -----------------------------------------------------------------------------------

def plain_parts(parts: tuple[Part, ...], indent: str = "") -> str:
    """Parts as plain text: text as written, a call as `▸ Tool` with its arguments below (code behind a bar)."""
    lines: list[str] = []
    for part in parts:
        if part.kind == "text":
            lines += [indent + line for line in part.text.splitlines()]
        elif part.kind == "broken":
            lines.append(f"{indent}▸ a tool call that does not parse:")
            lines += [f"{indent}    │ {line}" for line in part.text.splitlines() or [""]]
        else:
            lines.append(f"{indent}▸ {part.tool}" + ("" if part.args else " (no arguments)"))
            width = max((len(a.key) for a in part.args), default=0)
            for arg in part.args:
                if arg.code:
                    lines.append(f"{indent}    {arg.key}:")
                    lines += [f"{indent}      │ {line}" for line in arg.value.splitlines() or [""]]
                else:
                    lines.append(f"{indent}    {arg.key:<{width}}  {arg.value}")
    return "\n".join(lines)


def plain_context(view: ContextView) -> str:
    """The context's turns as plain text, each under its role."""
    lines = [f"({view.earlier} earlier message{'s' if view.earlier != 1 else ''} not shown)"] if view.earlier else []
    for turn in view.turns:
        cut = f" (cut {turn.cut} characters)" if turn.cut else ""
        lines.append(f"[{turn.role}]{cut}")
        lines.append(plain_parts(turn.parts, "  ") if turn.parts else "  (empty)")
    return "\n".join(lines)
