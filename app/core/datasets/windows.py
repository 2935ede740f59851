"""Long conversations cut into windows at turn boundaries (never between a tool call and its result), each window
starting with the system message and the task's opening request: `windows` (turns, packed) or `decisions` (one window
ending at each teacher action). Tool results and user messages too long are shortened (`shorten`), never a decision."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from app.core.datasets.shorten import Count, cut_of, fit

HEADER_SHARE = 4  # the first request (repeated atop every window) is cut to 1/HEADER_SHARE of the window if longer


@dataclass
class Fitting:
    """What fitting a conversation into windows shortened and dropped."""

    dropped: Counter = field(default_factory=Counter)  # turn blocks (decisions: teacher actions) left out, by reason
    cuts: list[tuple[str, int]] = field(default_factory=list)  # (role, characters cut) per shortened message
    decisions: int = 0  # `decisions`: the teacher actions seen (= windows + dropped)
    alone: int = 0  # windows of a decision too long beside the header, its first request cut further (`_alone`)

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


def _alone(messages: list[dict], tail: list[dict], max_length: int, count: Count,
           fitting: Fitting) -> list[dict] | str:
    """A window of its own for a decision (`tail` ends at it) too long beside the header: the first request is cut
    further, with the tail's tool results and user messages, so that it fits; a string says why it cannot."""
    head = messages[:header_length(messages)]
    if not head or head[-1]["role"] != "user" or not tail or tail[-1]["role"] != "assistant":
        return "assistant turns longer than the window"
    system = head[:-1]
    base = count(system)
    found = fit(system, [messages[len(head) - 1], *tail], max_length - base, count, base)
    if isinstance(found, str) or count(system + found) > max_length:
        return found if isinstance(found, str) else "still longer than the window once shortened"
    fitting.note([messages[len(head) - 1], *tail], found)
    fitting.alone += 1
    return system + found


def _layout(messages: list[dict], max_length: int, count: Count, fitting: Fitting):
    """(header, its tokens, the room left beside it, the turn blocks after it, each block's tokens beside it)."""
    header = _header(messages, max_length, count, fitting)
    base = count(header)
    parts = blocks(messages[header_length(messages):])
    return header, base, max_length - base, parts, [count(header + b) - base for b in parts]


def windows(messages: list[dict], max_length: int, count: Count) -> tuple[list[list[dict]], Fitting]:
    """(windows, what was shortened and which blocks were dropped because even shortened and alone with the header
    they exceed max_length). A new window repeats the previous window's last block when it fits with the next
    decision, so the next action is seen with the tool result it follows. A block whose tool results (or user
    message) do not fit with the decision after it is shortened so that they do (`shorten.fit`), else so that it
    fits alone; a header too long has its first request shortened."""
    fitting = Fitting()
    header, base, room, parts, sizes = _layout(messages, max_length, count, fitting)
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
            _close(out, header, current)
            current = []
            lone = _alone(messages, _trim(block), max_length, count, fitting)
            if isinstance(lone, str):
                fitting.dropped[found] += 1
            else:
                out.append(lone)
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


def decisions(messages: list[dict], max_length: int, count: Count) -> tuple[list[list[dict]], Fitting]:
    """One window per teacher action (each assistant message after the header), ending at it: the header, then as
    many whole blocks before it as fit (cut from the left at block boundaries), then its own block up to it. When the
    block right before it (the tool result or request it answers) does not fit whole it is shortened (`shorten.fit`),
    so the action is seen after its evidence; an action too long for a window even alone with the header is counted
    in `dropped`. Windows + dropped = `decisions`."""
    fitting = Fitting()
    header, base, room, parts, sizes = _layout(messages, max_length, count, fitting)
    out: list[list[dict]] = []
    for k, block in enumerate(parts):
        for j, m in enumerate(block):
            if m["role"] != "assistant":
                continue
            fitting.decisions += 1
            tail = block[: j + 1]
            found = _decision(header, parts, sizes, k, tail, room, count, base, fitting)
            if isinstance(found, str):
                lone = _alone(messages, tail, max_length, count, fitting)
                if isinstance(lone, str):
                    fitting.dropped[found] += 1
                else:
                    out.append(lone)
                continue
            window = header + found
            while count(window) > max_length:  # templates may not add up block by block: the oldest block goes first
                rest = [i for i, x in enumerate(found) if i and x["role"] in ("user", "assistant") and
                        _whole(found[i:])] if found[0] is not m else []
                if not rest:
                    window = []
                    break
                found = found[rest[0]:]
                window = header + found
            if not window:
                fitting.dropped["still longer than the window once shortened"] += 1
                continue
            out.append(window)
    return out, fitting


def _whole(messages: list[dict]) -> bool:
    """No tool result in `messages` answers a call made before them (a cut there keeps calls with their results)."""
    called = {c.get("id", "") for m in messages for c in m.get("tool_calls") or []}
    return all(m.get("tool_call_id", "") in called for m in messages if m["role"] == "tool")


def _decision(header: list[dict], parts: list[list[dict]], sizes: list[int], k: int, tail: list[dict], room: int,
              count: Count, base: int, fitting: Fitting) -> list[dict] | str:
    """The messages after the header of the window ending at `tail`'s last message (block k up to it), or why none
    fits."""
    size = sizes[k] if len(tail) == len(parts[k]) else count(header + tail) - base
    if size > room:
        shortened = fit(header, tail, room, count, base, size)
        if isinstance(shortened, str):
            return shortened
        fitting.note(tail, shortened)
        tail, size = shortened, count(header + shortened) - base
    start = k
    while start > 0 and size + sizes[start - 1] <= room:
        start -= 1
        size += sizes[start]
    before = [m for b in parts[start:k] for m in b]
    if start == k and k > 0:  # the evidence right before the action, shortened to fit beside it
        evidence = fit(header, parts[k - 1], room - size, count, base, sizes[k - 1]) if room > size else "no room"
        if not isinstance(evidence, str):
            fitting.note(parts[k - 1], evidence)
            before = evidence
    return before + tail
