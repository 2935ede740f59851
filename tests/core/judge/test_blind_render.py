"""What a person reads in a blind trial (judge/blind/render), on real agent transcripts: every tool call of two public
Claude Code sessions renders as its tool and arguments (the keys in order, long values cut with the datasets' marker,
code-like values as code), never as `<tool_call>` JSON; a call that does not parse is shown as such; a context shows
its last turns with the task, long tool results cut; an empty context is refused with why."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.judge.blind.render import (LAST_MESSAGES, MESSAGE_CHARS, VALUE_CHARS, BlindError, answer, context,
                                         plain_context, plain_parts)
from app.core.toolcalls.convention import TOOL_CONVENTION, as_text
from tests.conftest import SHARED

SESSIONS = [SHARED / "fixtures/real-world-2/yoavf+ai-sessions/examples/claude-code-pomodoro-timer.jsonl",
            SHARED / "fixtures/real-world-2/Mai0313+VibeCodingTracker/tests/fixtures/sessions/claude_code.jsonl"]


def chat_of(path: Path) -> list[dict]:
    """A Claude Code transcript as the held-out set holds a session: user, assistant (text + tool_calls), tool."""
    messages = [{"role": "system", "content": f"You are a coding agent. Tools: Bash, Edit, Read. {TOOL_CONVENTION}"}]
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        msg = rec.get("message") if isinstance(rec, dict) else None
        if not isinstance(msg, dict) or rec.get("type") not in ("user", "assistant"):
            continue
        blocks = msg["content"] if isinstance(msg["content"], list) else [{"type": "text", "text": msg["content"]}]
        text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        if rec["type"] == "assistant":
            calls = [{"type": "function", "function": {"name": b["name"], "arguments": b["input"]}}
                     for b in blocks if b.get("type") == "tool_use"]
            messages.append({"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})})
            continue
        for b in blocks:
            if b.get("type") == "tool_result":
                content = b.get("content")
                content = content if isinstance(content, str) else "\n".join(
                    c.get("text", "") for c in content or [] if isinstance(c, dict))
                messages.append({"role": "tool", "content": content})
        if text.strip():
            messages.append({"role": "user", "content": text})
    return messages


@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: p.parent.name)
def test_every_real_tool_call_reads_as_tool_and_arguments(path):
    messages = chat_of(path)
    said = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
    assert len(said) >= 20
    cut = code = 0
    for m in said:
        text = as_text(m)["content"]  # the Hermes text an answer is, as the teacher's action is stored
        parts = answer(text)
        calls = [p for p in parts if p.kind == "call"]
        assert [p.tool for p in calls] == [c["function"]["name"] for c in m["tool_calls"]]
        for part, call in zip(calls, m["tool_calls"]):
            assert [a.key for a in part.args] == list(call["function"]["arguments"])
            for arg in part.args:
                assert len(arg.value) <= VALUE_CHARS + 40
                cut += arg.cut > 0
                code += arg.code
                if arg.cut:
                    assert "…[cut " in arg.value
        shown = plain_parts(parts)
        assert "<tool_call>" not in shown and '{"name"' not in shown and "</tool_call>" not in shown
        assert all(f"▸ {c['function']['name']}" in shown for c in m["tool_calls"])
    assert cut and code  # long values (a file written whole) were cut; commands and edits read as code


def test_text_and_calls_keep_their_order_and_a_broken_call_says_so():
    text = ('I will look first.\n<tool_call>{"name": "Bash", "arguments": {"command": "ls -la\\npwd"}}</tool_call>\n'
            'Then read.<tool_call>{"name": "Read", "arguments": {"file_path": "a.py", "limit": 20}}</tool_call>'
            '<tool_call>{"name": "Edit", "arguments": {"file_path": </tool_call> and <tool_call>{"name": "Wr')
    parts = answer(text)
    assert [p.kind for p in parts] == ["text", "call", "text", "call", "broken", "text", "broken"]
    bash, read = parts[1], parts[3]
    assert bash.tool == "Bash" and bash.args[0].code and bash.args[0].value == "ls -la\npwd"
    assert [(a.key, a.value, a.code) for a in read.args] == [("file_path", "a.py", False), ("limit", "20", False)]
    shown = plain_parts(parts)
    assert shown.count("a tool call that does not parse") == 2 and "<tool_call>" not in shown
    assert answer("</tool_call> just text") == answer("just text")  # a stray closing tag is dropped
    assert answer("") == ()


def test_a_context_shows_its_last_turns_with_the_task_and_cuts_long_results():
    messages = chat_of(SESSIONS[1])
    view = context(messages)
    rest = [m for m in messages if m["role"] != "system"]
    assert len(view.turns) <= LAST_MESSAGES and view.earlier == len(rest) - len(view.turns)
    assert view.tools == ("Bash", "Edit", "Read")
    last_user = max(i for i, m in enumerate(rest) if m["role"] == "user")
    assert any(t.role == "user" for t in view.turns) or last_user < len(rest) - LAST_MESSAGES
    long = [{"role": "system", "content": "Tools: Bash."}, {"role": "user", "content": "Run the tests."},
            *[{"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "Bash", "arguments": {"command": f"pytest -k t{i}"}}}]}
              if i % 2 == 0 else {"role": "tool", "content": "x" * (MESSAGE_CHARS * 3 if i == 11 else 10)}
              for i in range(12)]]
    view = context(long)
    assert view.turns[0].role == "user" and view.turns[0].parts[0].text == "Run the tests."  # the task stays
    assert len(view.turns) == LAST_MESSAGES and view.earlier == 13 - LAST_MESSAGES
    results = [t for t in view.turns if t.role == "tool"]
    assert results[-1].cut > MESSAGE_CHARS and "…[cut " in results[-1].parts[0].text
    shown = plain_context(view)
    assert "earlier messages not shown" in shown and "pytest -k t10" in shown and "<tool_call>" not in shown


def test_an_empty_context_is_refused_with_why():
    with pytest.raises(BlindError) as err:
        context([{"role": "system", "content": "Tools: Bash."}, {"role": "user", "content": "  "}])
    assert "this context is empty" in str(err.value) and "cannot judge an answer to nothing" in str(err.value)
