"""What the windows teach about calling: on real transcripts (read from the shared fixtures at test time) the agent's
text answers stay decisions of the examples as often as the transcript has them; the `decisions` windows end each
at one teacher action, and every action is a window or counted as dropped."""
from __future__ import annotations

import json
import re

import pytest
from sqlalchemy import select

from app.core.base.schema import AgentSession, MessageRow
from app.core.capture.ingest import Ingestor
from app.core.datasets import windows
from app.core.datasets.convert import conversation
from app.core.importer import import_paths
from tests.core.capture.helpers import REAL
from tests.core.datasets.test_pieces import session, words

REAL2 = REAL.parent / "real-world-2"
TRANSCRIPTS = {  # several requests, each answered in text after tool calls
    "claude": REAL2 / "procrypto+Personal_AI_Infrastructure" / ".claude" / "projects" /
    "-Users-neilhart-Documents-BONKbot-github-qa-tools" / "0dea067c-f7bb-4a30-afaf-c78ff0fdc7e0.jsonl",
    "codex": REAL2 / "Python-AI-Solutions+agentic-neurodata-conversion" / ".codex" / "sessions" / "2025" / "09" /
    "26" / "rollout-2025-09-26T17-01-04-019985ca-7ef7-7580-a921-c20ac619f40b.jsonl",
}
THINK = re.compile(r"<think>.*?</think>\s*", re.S)


def chars(messages: list[dict]) -> int:
    """A stand-in token count: about four characters a token, plus a template's framing per message."""
    return sum(4 + len(json.dumps({k: m.get(k) for k in ("content", "tool_calls")}, ensure_ascii=False)) // 4
               for m in messages)


def real_messages(store, path) -> list[dict]:
    if not path.is_file():
        pytest.skip(f"the shared real-world-2 fixtures are not here ({path})")
    import_paths(Ingestor(store), [path])
    with store.session() as s:
        sess = s.scalars(select(AgentSession).where(AgentSession.parent_id.is_(None))).first()
        rows = s.scalars(select(MessageRow).where(MessageRow.session_id == sess.id, MessageRow.branch == 0)
                         .order_by(MessageRow.seq)).all()
        return conversation(sess, rows).messages


def is_text(m: dict) -> bool:
    return not m.get("tool_calls")


def final_answers(msgs: list[dict]) -> list[dict]:
    """Text answers the agent ended a request with (the next message is the person's, or none)."""
    return [m for i, m in enumerate(msgs) if m["role"] == "assistant" and is_text(m)
            and THINK.sub("", m["content"]).strip() and (i + 1 == len(msgs) or msgs[i + 1]["role"] == "user")]


def actions(msgs: list[dict]) -> list[dict]:
    return [m for m in msgs[windows.header_length(msgs):] if m["role"] == "assistant"]


@pytest.mark.parametrize("agent", sorted(TRANSCRIPTS))
def test_the_agents_text_answers_stay_decisions_of_the_examples(store, agent):
    msgs = real_messages(store, TRANSCRIPTS[agent])
    finals, every = final_answers(msgs), actions(msgs)
    assert len(finals) >= 3  # the transcript answers several requests in text

    # the default windows: every final answer is trained in some window unless its block was counted as dropped
    found, fitting = windows.windows(msgs, 1024, chars)
    trained = [m for w in found for m in w[windows.header_length(w):] if m["role"] == "assistant"]
    kept = [m for m in finals if any(m is t for t in trained)]
    assert len(finals) - len(kept) <= fitting.too_long

    # decisions: each action ends exactly one window, or is counted; text answers end windows as often as the
    # transcript has them, within the decisions dropped
    found, fitting = windows.decisions(msgs, 1024, chars)
    ends = [w[-1] for w in found]
    assert fitting.decisions == len(every) == len(found) + fitting.too_long
    assert all(sum(e is m for e in ends) == 1 for m in every if any(e is m for e in ends))
    dropped = fitting.too_long
    assert sum(1 for m in finals if not any(e is m for e in ends)) <= dropped  # a final answer ends a window
    text_ends = sum(1 for e in ends if is_text(e))
    text_all = sum(1 for m in every if is_text(m))
    assert text_all - dropped <= text_ends <= text_all
    assert all(chars(w) <= 1024 for w in found)


def test_decision_windows_end_each_at_one_teacher_action_and_lose_none_uncounted():
    msgs = session(12)
    found, fitting = windows.decisions(msgs, 80, words)
    every = actions(msgs)
    assert [w[-1] for w in found] == every and fitting.decisions == len(every) and fitting.too_long == 0
    for w in found:
        assert w[:2] == msgs[:2] and words(w) <= 80  # the header on top, within max_length
        at = msgs.index(w[-1])
        assert w[-len(w) + 2:] == msgs[at - len(w) + 3: at + 1]  # the context is what came right before, cut left
        assert w[-2] is msgs[at - 1]  # the action is seen after the result it follows (or the request)
        called = {c["id"] for m in w for c in m.get("tool_calls") or []}
        assert all(m["tool_call_id"] in called for m in w if m["role"] == "tool")  # no result without its call

    msgs = session(4)
    msgs[5]["content"] = "huge " * 500  # an action too long for any window: counted, the others kept
    found, fitting = windows.decisions(msgs, 60, words)
    assert fitting.dropped == {"assistant turns longer than the window": 1}
    assert len(found) + fitting.too_long == fitting.decisions == len(actions(msgs))
    assert msgs[5] not in [w[-1] for w in found]


def test_an_action_after_an_over_long_result_keeps_the_result_shortened_before_it():
    msgs = session(3)
    msgs[4]["content"] = "first " + "huge " * 500 + "last"
    found, fitting = windows.decisions(msgs, 60, words)
    assert fitting.too_long == 0 and len(found) == 4
    after = next(w for w in found if w[-1] is msgs[5])
    assert "[cut " in after[-2]["content"] and after[-2]["content"].startswith("first ")


@pytest.mark.parametrize("cut", [windows.windows, windows.decisions])
def test_a_decision_too_long_beside_the_header_gets_a_window_with_the_request_cut_further(cut):
    msgs = session(3)
    msgs[1]["content"] = "do the task " + "please " * 60  # cut to a quarter of the window in every header
    msgs[5]["content"] = "long " * 50  # fits the window beside the system message, not beside the header
    found, fitting = cut(msgs, 80, words)
    assert fitting.too_long == 0 and fitting.alone == 1
    alone = next(w for w in found if any(m is msgs[5] for m in w))
    assert alone[-1] is msgs[5] and alone[1]["content"].startswith("do the task ") and "[cut " in alone[1]["content"]
    assert words(alone) <= 80



class Words:
    """A stand-in renderer: one token per word (`words`), assistant words trained."""

    label, template_sha256, convention = "words", "w" * 64, "hermes-text"

    def count(self, messages: list[dict]) -> int:
        return words(messages)

    def render(self, messages: list[dict]) -> dict:
        ids, masks = [], []
        for m in messages:
            n = words([m])
            ids += [1] * n
            masks += [int(m["role"] == "assistant")] * n
        return {"text": "", "input_ids": ids, "assistant_masks": masks, "segments": []}

    def deep(self, messages: list[dict], rendered: dict) -> list[str]:
        return []


def test_a_build_with_decision_windows_counts_every_action(store, agent_dir, tmp_path):
    from app.core.datasets.builder import build
    from app.core.datasets.config import BuildConfig
    from tests.core.datasets.helpers import ingest, records, write_session

    for i in range(3):
        write_session(agent_dir, i)
    ingest(store, agent_dir)
    config = BuildConfig(name="decisions", mode="full", windows="decisions", max_length=200, val_share=0.0,
                         test_share=0.0)
    man = build(store, config, Words(), tmp_path / "out")
    assert man.config["windows"] == "decisions"
    dropped = sum(n for k, n in man.counts.items() if k.startswith("decisions dropped: "))
    assert man.counts["decisions"] == man.counts["decision windows"] + dropped == 3 * 4  # read, edit, test, answer
    examples = records(tmp_path / "out", "train")
    short = man.filters.get("shorter than 32 tokens (examples)", 0)
    assert len(examples) == man.counts["decision windows"] - man.counts.get("excluded", 0) - short
    assert [r["messages"][-1]["role"] for r in examples] == ["assistant"] * len(examples)
    assert sum(1 for r in examples if not r["messages"][-1].get("tool_calls")) == 3  # each session's text answer
