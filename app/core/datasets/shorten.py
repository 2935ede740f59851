"""Keep the teacher's decision, shorten the evidence: a tool result or a user message too long for a window is cut to a
budget, its head and tail kept around a marker saying how much was cut (the way agents show long output). Assistant
messages (what is trained) and tool-call arguments are never cut. The one cutting function of the build."""
from __future__ import annotations

from typing import Callable

Count = Callable[[list[dict]], int]  # tokens of a rendered message list
SHRINKABLE = ("tool", "user")  # the roles whose content may be cut
SNAP = 0.2  # a cut moves to a line break when there is one within this share of the kept piece
ROUNDS = 6  # budget corrections after the real count (templates do not add up exactly)


def marker(cut: int) -> str:
    return f"\n…[cut {cut:,} characters]…\n".replace(",", " ")


def clip(text: str, keep: int) -> str:
    """`text` with about `keep` characters kept, head and tail (line breaks preferred), the rest replaced by the
    marker; unchanged when the marker would not make it shorter."""
    keep = max(0, keep)
    if len(text) - keep <= len(marker(len(text))):
        return text
    head_end, tail_start = keep - keep // 2, len(text) - keep // 2
    nl = text.rfind("\n", head_end - int(head_end * SNAP), head_end)
    head_end = nl + 1 if nl >= 0 else head_end
    nl = text.find("\n", tail_start, tail_start + int(keep // 2 * SNAP))
    tail_start = nl + 1 if nl >= 0 else tail_start
    return text[:head_end] + marker(tail_start - head_end) + text[tail_start:]


def cut_of(before: dict, after: dict) -> int:
    """Characters a shortened message lost (0 when it is the same)."""
    return len(before.get("content") or "") - len(after.get("content") or "") if before is not after else 0


def shares(lengths: list[int], budget: int) -> list[int]:
    """Characters each message may keep: short ones whole, the rest share what is left equally (water-filling)."""
    out = [0] * len(lengths)
    left, budget = len(lengths), max(0, budget)
    for i in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):
        out[i] = min(lengths[i], budget // left)
        budget -= out[i]
        left -= 1
    return out


def _cut(m: dict, keep: int) -> dict:
    text = clip(m["content"], keep)
    return m if text == m["content"] else dict(m, content=text)


def fit(context: list[dict], block: list[dict], room: int, count: Count, base: int,
        size: int | None = None) -> list[dict] | str:
    """`block` (after `context`, whose count is `base`; `size` its tokens there when known) with its tool results and
    user messages cut so that it takes at most `room` tokens; the messages not cut are the same objects. A string
    says why it cannot fit."""
    size = count(context + block) - base if size is None else size
    if size <= room:
        return block
    idx = [i for i, m in enumerate(block) if m["role"] in SHRINKABLE and m.get("content")]
    emptied = [_cut(m, 0) if i in idx else m for i, m in enumerate(block)]
    fixed = count(context + emptied) - base
    if not idx or fixed > room:
        return "assistant turns longer than the window"
    lengths = [len(block[i]["content"]) for i in idx]
    budget = int((room - fixed) * sum(lengths) / max(1, size - fixed))  # tokens of room -> characters
    for _ in range(ROUNDS):
        keep = dict(zip(idx, shares(lengths, budget)))
        out = [_cut(m, keep[i]) if i in keep else m for i, m in enumerate(block)]
        size = count(context + out) - base
        if size <= room:
            return out
        budget = int(budget * (room - fixed) / max(1, size - fixed) * 0.95)
    return "still longer than the window once shortened"
