"""Long conversations cut into windows at turn boundaries (never between a tool call and its result), each window
starting with the system message and the task's opening request."""
from __future__ import annotations

from typing import Callable

Count = Callable[[list[dict]], int]  # tokens of a rendered message list


def header_length(messages: list[dict]) -> int:
    """System message(s) and the first user request: kept at the top of every window."""
    first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), None)
    if first_user is None:
        return next((i for i, m in enumerate(messages) if m["role"] != "system"), len(messages))
    return first_user + 1


def blocks(messages: list[dict]) -> list[list[dict]]:
    """Split at user/assistant messages where every earlier tool call has its result."""
    out: list[list[dict]] = []
    pending: set[str] = set()
    for m in messages:
        if m["role"] == "user":
            pending.clear()  # a call never answered (interrupted) does not hold the rest of the session together
        if not out or m["role"] == "user" or m["role"] == "assistant" and not pending:
            out.append([])
        out[-1].append(m)
        for call in m.get("tool_calls") or []:
            pending.add(call.get("id", ""))
        if m["role"] == "tool":
            pending.discard(m.get("tool_call_id", ""))
    return out


def _trim(window: list[dict]) -> list[dict]:
    """A window ends on an assistant message (what is after it teaches nothing)."""
    end = max((i for i, m in enumerate(window) if m["role"] == "assistant"), default=-1)
    return window[: end + 1]


def windows(messages: list[dict], max_length: int, count: Count) -> tuple[list[list[dict]], int]:
    """(windows, blocks dropped because even alone with the header they exceed max_length). A new window repeats
    the previous window's last block (when it fits), so the next action is seen with the tool result it follows."""
    cut = header_length(messages)
    header, rest = messages[:cut], messages[cut:]
    base = count(header)
    parts = blocks(rest)
    sizes = [count(header + b) - base for b in parts]
    out: list[list[dict]] = []
    current: list[tuple[list[dict], int]] = []  # (block, size)
    too_long = 0
    for block, size in zip(parts, sizes):
        if base + size > max_length:
            too_long += 1
            _close(out, header, current)
            current = []
            continue
        if base + sum(n for _, n in current) + size > max_length:
            _close(out, header, current)
            carry = current[-1:] if current and base + current[-1][1] + size <= max_length else []
            current = carry
        current.append((block, size))
    _close(out, header, current)
    return _fit(out, max_length, count), too_long


def _close(out: list[list[dict]], header: list[dict], current: list[tuple[list[dict], int]]) -> None:
    window = _trim(header + [m for block, _ in current for m in block])
    if any(m["role"] == "assistant" for m in window):
        out.append(window)


def _fit(found: list[list[dict]], max_length: int, count: Count) -> list[list[dict]]:
    """Check each window's exact length (templates may not add up block by block); shorten from the end if needed."""
    out = []
    for window in found:
        while window and count(window) > max_length:
            window = _trim(window[:-1])
        if any(m["role"] == "assistant" for m in window):
            out.append(window)
    return out
