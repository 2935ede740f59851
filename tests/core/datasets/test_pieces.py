"""The build's pure pieces: windows at turn boundaries, filters with counts, MinHash near-duplicates, stable splits."""
from __future__ import annotations

import json
from types import SimpleNamespace

from app.core.datasets import dedup, filters, windows
from app.core.datasets.config import Filters
from app.core.datasets.splits import split_of


def words(messages: list[dict]) -> int:
    """A stand-in token count: words of content and tool calls, plus 3 per message (a template's framing)."""
    return sum(3 + len((m.get("content") or "").split()) + 5 * len(m.get("tool_calls") or []) for m in messages)


def session(steps: int) -> list[dict]:
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "do the task please now"}]
    for i in range(steps):
        msgs.append({"role": "assistant", "content": f"step {i}", "tool_calls": [
            {"id": f"c{i}a", "type": "function", "function": {"name": "Read", "arguments": {}}},
            {"id": f"c{i}b", "type": "function", "function": {"name": "Grep", "arguments": {}}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}a", "content": "result " * 4})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}b", "content": "result " * 4})
    msgs.append({"role": "assistant", "content": "all done"})
    return msgs


def test_windows_keep_the_request_fit_and_never_cut_a_call_from_its_results():
    msgs = session(12)
    found, fitting = windows.windows(msgs, 80, words)
    assert len(found) > 2 and fitting.too_long == 0 and not fitting.cuts
    for w in found:
        assert w[:2] == msgs[:2]  # system + the opening request on top of every window
        assert words(w) <= 80 and w[-1]["role"] == "assistant"
        answered = {m["tool_call_id"] for m in w if m["role"] == "tool"}
        for m in w[:-1]:
            for call in m.get("tool_calls") or []:
                assert call["id"] in answered  # a call inside a window has its results in that window
    covered = {m["content"] for w in found for m in w if m["role"] == "assistant"}
    assert covered == {m["content"] for m in msgs if m["role"] == "assistant"}  # every step is taught somewhere


def test_a_block_whose_assistant_turn_is_too_long_for_any_window_is_counted_and_left_out():
    msgs = session(3)
    msgs[5]["content"] = "huge " * 500  # the teacher's own turn: never cut
    found, fitting = windows.windows(msgs, 60, words)
    assert fitting.dropped == {"assistant turns longer than the window": 1}
    assert all("huge" not in (m.get("content") or "") for w in found for m in w)


def test_a_long_tool_result_is_cut_head_and_tail_so_the_decision_after_it_is_kept():
    msgs = session(3)
    msgs[4]["content"] = "first " + "huge " * 500 + "last"
    found, fitting = windows.windows(msgs, 60, words)
    assert fitting.too_long == 0 and [role for role, _ in fitting.cuts] == ["tool"]
    cut = [m for w in found for m in w if m["role"] == "tool" and "[cut " in m["content"]]
    assert cut and all(m["content"].startswith("first ") and m["content"].endswith("last") for m in cut)
    assert all(words(w) <= 60 for w in found)
    assert any(m["role"] == "tool" and "[cut " in m["content"] and w[-1] is msgs[5]
               for w in found for m in w)  # the shortened result is followed by the decision it led to
    taught = [m for w in found for m in w if m["role"] == "assistant"]
    assert all(any(m is t for t in taught) for m in msgs if m["role"] == "assistant")  # every step, unchanged


def test_an_over_long_opening_request_is_shortened_in_the_header_of_every_window():
    msgs = session(6)
    msgs[1]["content"] = "please " + "context " * 400 + "thanks"
    found, fitting = windows.windows(msgs, 120, words)
    assert fitting.too_long == 0 and [role for role, _ in fitting.cuts] == ["user"]
    assert found and all(w[1]["content"].startswith("please ") and "[cut " in w[1]["content"] and
                         words(w[:2]) - words(w[:1]) <= 120 // windows.HEADER_SHARE for w in found)


def row(i: int, **over):
    sig = {"tool_sequence": ["Read", "Edit"], "recoveries": 0, "reasoning_markers": 0}
    sig.update(over.pop("sig", {}))
    base = dict(id=f"s{i}", parent_id=None, outcome="finished", tool_calls=2, signals_json=json.dumps(sig))
    base.update(over)
    return SimpleNamespace(**base)


def test_each_filter_removes_what_it_should_and_counts_it():
    rows = [row(0), row(1, outcome="abandoned"), row(2, outcome="errored"), row(3, tool_calls=0, sig={"tool_sequence": []}),
            row(4, parent_id="s0"), row(5, sig={"recoveries": 1, "reasoning_markers": 3})]
    kept, removed = filters.apply(rows, Filters(drop_abandoned=True))
    assert [r.id for r in kept] == ["s0", "s4", "s5"]
    assert removed == {"abandoned": 1, "errored": 1, "fewer than 1 tool calls": 1}
    kept, removed = filters.apply(rows, Filters())  # by default an abandoned session stays (the builder trims it)
    assert [r.id for r in kept] == ["s0", "s1", "s4", "s5"] and "abandoned" not in removed
    kept, removed = filters.apply(rows, Filters(require_recovery=True, include_subagents=False, drop_abandoned=False,
                                                drop_errored=False, min_tool_calls=0, min_steps=0))
    assert [r.id for r in kept] == ["s5"] and removed["sub-agent sessions"] == 1
    kept, removed = filters.apply(rows, Filters(min_reasoning=2))
    assert [r.id for r in kept] == ["s5"] and removed["reasoning below 2"] == 3  # s0, s1 (abandoned, kept), s4


def test_near_duplicates_keep_the_earliest():
    text = " ".join(f"word{i}" for i in range(200))
    items = [("old", text), ("other", " ".join(f"x{i}" for i in range(200))), ("new", text + " one more line")]
    assert dedup.near_duplicates(items, 0.85) == {"new": "old"}
    assert dedup.near_duplicates(items, 0) == {}


def test_splits_are_stable_shares_and_heldout_wins():
    ids = [f"session-{i}" for i in range(4000)]
    splits = [split_of(i, 0.1, 0.1) for i in ids]
    assert splits == [split_of(i, 0.1, 0.1) for i in ids]  # the same every time
    assert abs(splits.count("test") / 4000 - 0.1) < 0.02 and abs(splits.count("val") / 4000 - 0.1) < 0.02
    train_one = next(i for i, s in zip(ids, splits) if s == "train")
    assert split_of(train_one, 0.1, 0.1, heldout=frozenset({train_one})) == "test"
