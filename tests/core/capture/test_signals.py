"""Behavioural signals: counted on the branch that reached the end, from real fixtures and hand-made sessions; RE2's
counts are `re`'s on every real fixture's text and on non-ASCII text."""
from __future__ import annotations

import random
import re

from app.core.capture import agents, behaviour
from app.core.capture.behaviour import signals
from app.core.capture.detect import detect_format
from app.core.capture.parsers.claude import parse_claude
from app.core.capture.parsers.gemini import parse_gemini
from app.core.capture.session import Message, Part, Session
from tests.core.capture.helpers import KV, REAL


def call(name: str, cid: str, **inp) -> Part:
    return Part("tool_call", tool_name=name, call_id=cid, tool_input=inp)


def result(cid: str, text: str = "ok", error: bool = False) -> Message:
    return Message("tool", [Part("tool_result", text, call_id=cid, is_error=error)])


def session(*messages: Message) -> Session:
    return Session("claude-code", "s", "/x.jsonl", messages=list(messages))


def test_a_thorough_session_with_an_error_and_its_recovery():
    s = session(
        Message("user", [Part("text", "Fix the failing test in parser.py")]),
        Message("assistant", [Part("thinking", "First, I must read the tests before changing code. "
                                               "Skipping the docs because they are out of date."),
                              call("Grep", "c1"), call("Read", "c2"), call("Read", "c3")]),
        result("c1"), result("c2"), result("c3"),
        Message("assistant", [Part("text", "Then I will edit it."), call("Edit", "c4")]),
        result("c4", "old_string not found", error=True),
        Message("assistant", [Part("text", "Actually, the indentation differs. Let me retry."), call("Edit", "c5")]),
        result("c5"),
        Message("assistant", [Part("text", "Done: the test passes now.")]),
    )
    sig = signals(s)
    assert sig.tool_sequence == ["Grep", "Read", "Read", "Edit", "Edit"]
    assert sig.tool_counts == {"Grep": 1, "Read": 2, "Edit": 2}
    assert sig.reads_before_first_edit == 3 and sig.exploration == "moderate"
    assert sig.errors == 1 and sig.recoveries == 1
    assert sig.reasoning_markers >= 2 and sig.constraints == 1 and sig.pruning == 1 and sig.self_corrections >= 1
    assert sig.outcome == "finished"


def test_outcome_guesses():
    asked = Message("user", [Part("text", "do it")])
    assert signals(session(asked)).outcome == "abandoned"
    assert signals(session(asked, Message("assistant", [call("Bash", "c1")]), result("c1", "boom", True))
                   ).outcome == "errored"


def test_real_claude_rejection_fixture_counts_its_errors():
    s = parse_claude(KV / "rejections" / "claude_with_rejection.jsonl")
    sig = signals(s)
    errors = sum(1 for m in s.messages for p in m.parts if p.kind == "tool_result" and p.is_error)
    assert errors == 2 and sig.errors == 2
    assert sig.tool_sequence == s.tool_sequence()


def test_real_gemini_tool_error_fixture():
    s = parse_gemini(KV / "rejections" / "gemini_with_tool_error.jsonl")
    sig = signals(s)
    assert sig.errors >= 1 and sum(sig.tool_counts.values()) == len(sig.tool_sequence) > 0


def test_the_word_patterns_count_what_they_counted_without_their_first_letter_look():
    """Each word pattern's look at the next letter only skips positions where none of its words can start: the
    counts equal the patterns without it, on every real fixture's assistant text and on caseless letters (ſ, K)."""
    texts = ["ſhould read it before; WAIT, actually ſkip it as noted. MUST first. Let me retry. mY MISTAKE",
             "no need to run since it passed\ndon't need to, because\nNot needed as is\nWon't since"]
    for base in (REAL, REAL.parent / "real-world-2"):
        for f in sorted(base.rglob("*.json*")):
            agent = detect_format(f)
            if agent in agents.AGENTS:
                parse = agents.load(agents.AGENTS[agent].parser)
                texts.append(behaviour._assistant_text(parse(f, final=True).messages))
    assert sum(map(len, texts)) > 200_000
    for name in ("CONSTRAINT", "PRUNING", "SELF_CORRECTION"):
        fast = getattr(behaviour, name)
        plain = re.compile(re.sub(r"\(\?=\[[a-z]+\]\)", "", fast.pattern), fast.flags)
        assert plain.pattern != fast.pattern
        got = [len(fast.findall(t)) for t in texts]
        assert got == [len(plain.findall(t)) for t in texts] and sum(got) > 5, name


NON_ASCII = ["ſhould", "ſkip", "İgnore", "ıgnore", "waıt", "sKip", "éfirst", "first́", "日本 first", "step ٣", "step ²",
             "\u00a0", "\u2003", "\u3000", "\x0b", "\x1c", "\u2028", "\x85", "🙂", "Ⅻ", "naïve", "—", "’"]
WORDS = ["first", "then", "next", "finally", "after that", "step 3", "must", "need to", "have to", "should", "before",
         "always", "never", "skip", "skipping", "no need to", "won't", "don't need to", "ignore", "because", "since",
         "as", "actually", "wait", "on second thought", "i was wrong", "let me retry", "let me fix", "my mistake",
         "correction", "\n", "\r\n", ".", ",", ":", " ", "_", "\t"]


def _re_counts(text: str) -> tuple[int, int, int, int]:
    return tuple(len(p.findall(text)) for p in (behaviour.REASONING, behaviour.CONSTRAINT, behaviour.PRUNING,
                                                behaviour.SELF_CORRECTION))


def test_re2_counts_what_re_counts_on_real_and_non_ascii_text():
    """RE2's \\b, \\w, \\s and \\d are ASCII: the text is made ASCII first, each character standing for what it
    is to `re` (a letter (?i) folds to ASCII: ſ K İ ı; a Unicode digit, letter, space; NBSP, \\x0b, \\x1c...): the
    same counts on every real fixture's assistant text and on 2 000 seeded mixes of the words and such characters."""
    texts = []
    for base in (REAL, REAL.parent / "real-world-2"):
        for f in sorted(base.rglob("*.json*")):
            agent = detect_format(f)
            if agent in agents.AGENTS:
                session = agents.load(agents.AGENTS[agent].parser)(f, final=True)
                texts += [behaviour._assistant_text(s.messages) for s in (session, *session.subagents)]
    assert sum(map(len, texts)) > 200_000 and sum(not t.isascii() for t in texts) > 10
    rng = random.Random(7)
    pool = WORDS + NON_ASCII
    texts += ["".join(rng.choice(pool) + rng.choice(["", " ", "\n", "é", "\u00a0"]) for _ in range(rng.randint(1, 40)))
              for _ in range(2000)]
    got = [behaviour.counts(t) for t in texts]
    assert got == [_re_counts(t) for t in texts]
    assert all(sum(g[i] for g in got) > 20 for i in range(4))
    assert behaviour.counts("ſhould read it before. İgnore it since. éfirst, first́") == (0, 1, 1, 0)
