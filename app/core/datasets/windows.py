"""Long conversations cut into windows at turn boundaries (never between a tool call and its result), each window
starting with the system message and the task's opening request. A turn block too long for a window has its tool
results and user messages shortened (`shorten`), so the teacher's decisions in it are kept."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from app.core.datasets.shorten import Count, cut_of, fit

HEADER_SHARE = 4  # the first request (repeated atop every window) is cut to 1/HEADER_SHARE of the window if longer


@dataclass
class Fitting:
    """What fitting a conversation into windows shortened and dropped."""

    dropped: Counter = field(default_factory=Counter)  # turn blocks left out, by reason
    cuts: list[tuple[str, int]] = field(default_factory=list)  # (role, characters cut) per shortened message

    @property
    def too_long(self) -> int:
        return sum(self.dropped.values())

    def note(self, before: list[dict], after: list[dict]) -> None:
        self.cuts += [(a["role"], n) for b, a in zip(before, after) if (n := cut_of(b, a))]


def header_length(messages: list[dict]) -> int:
    """System message(s) and the first user request: kept at the top of every window."""
    first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), None)
    if first_user is None:
        return next((i for i, m in enumerate(messages) if m["role"] != "system"), len(messages))
    return first_user + 1


def blocks(messages: list[dict]) -> list[list[dict]]:
    """Split at user/assistant messages where every earlier tool call has its result (a call never answered does
    not hold the rest of the session together)."""
    out: list[list[dict]] = []
    pending: set[str] = set()
    answered = {m.get("tool_call_id", "") for m in messages if m["role"] == "tool"}
    for m in messages:
        if m["role"] == "user":
            pending.clear()
        if not out or m["role"] == "user" or m["role"] == "assistant" and not pending:
            out.append([])
        out[-1].append(m)
        for call in m.get("tool_calls") or []:
            if call.get("id", "") in answered:
                pending.add(call.get("id", ""))
        if m["role"] == "tool":
            pending.discard(m.get("tool_call_id", ""))
    return out


def _trim(window: list[dict]) -> list[dict]:
    """A window ends on an assistant message (what is after it teaches nothing)."""
    end = max((i for i, m in enumerate(window) if m["role"] == "assistant"), default=-1)
    return window[: end + 1]


def _header(messages: list[dict], max_length: int, count: Count, fitting: Fitting) -> list[dict]:
    """The header, its first request shortened when it takes more than its share of the window."""
    header = messages[:header_length(messages)]
    if not header or header[-1]["role"] != "user":
        return header
    found = fit(header[:-1], header[-1:], max_length // HEADER_SHARE, count, count(header[:-1]))
    if isinstance(found, str):
        return header
    fitting.note(header[-1:], found)
    return header[:-1] + found


def windows(messages: list[dict], max_length: int, count: Count) -> tuple[list[list[dict]], Fitting]:
    """(windows, what was shortened and which blocks were dropped because even shortened and alone with the header
    they exceed max_length). A new window repeats the previous window's last block when it fits with the next
    decision, so the next action is seen with the tool result it follows. A block whose tool results (or user
    message) do not fit with the decision after it is shortened so that they do (`shorten.fit`), else so that it
    fits alone; a header too long has its first request shortened."""
    fitting = Fitting()
    header = _header(messages, max_length, count, fitting)
    base = count(header)
    room = max_length - base
    parts = blocks(messages[header_length(messages):])
    sizes = [count(header + b) - base for b in parts]
    leads: dict[int, int] = {}

    def lead(i: int) -> int:
        """Tokens of block i up to its last assistant message (the decision a window may end on)."""
        if i not in leads:
            head = _trim(parts[i])
            leads[i] = count(header + head) - base if head else 0
        return leads[i]

    out: list[list[dict]] = []
    current: list[tuple[list[dict], int]] = []  # (block, size)
    for i, block in enumerate(parts):
        then = i + 1 < len(parts) and sizes[i] + sizes[i + 1] > room  # the next decision may not fit after it
        pair = room - lead(i + 1) if then else room
        found: list[dict] | str = block
        if sizes[i] > pair:
            found = fit(header, block, pair, count, base, sizes[i]) if pair > 0 else "no room"
            if isinstance(found, str):
                found = block if sizes[i] <= room else fit(header, block, room, count, base, sizes[i])
        if isinstance(found, str):
            fitting.dropped[found] += 1
            _close(out, header, current)
            current = []
            continue
        if found is not block:
            fitting.note(block, found)
            parts[i], sizes[i] = found, count(header + found) - base
            leads.pop(i, None)
        size = sizes[i]
        if base + sum(n for _, n in current) + size > max_length:
            _close(out, header, current)
            fits = current and (current[-1][1] + size <= room or current[-1][1] + lead(i) <= room)
            current = current[-1:] if fits else []
        current.append((found, size))
    _close(out, header, current)
    return _fit(out, max_length, count), fitting


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
