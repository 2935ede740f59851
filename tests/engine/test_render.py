"""Template round-trip on SmolLM2's own chat template (its tokenizer read from the embedded GGUF): rendered ->
tokenised -> the masked tokens are exactly the non-assistant ones; a template that cannot be masked is caught."""
from __future__ import annotations

import copy

import pytest

from engine import chat_template
from engine.render import Renderer

CONVERSATION = [
    {"role": "system", "content": "You are a coding agent. Tools: Bash, Read."},
    {"role": "user", "content": "The tests fail; fix utils.py"},
    {"role": "assistant", "content": "<think>\nRead it first.\n</think>\nLet me look.",
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "Read", "arguments": {"path": "utils.py"}}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "Read", "content": "def add(a, b):\n    return a - b"},
    {"role": "assistant", "content": "",
     "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "Bash", "arguments": {"cmd": "pytest"}}}]},
    {"role": "tool", "tool_call_id": "c2", "name": "Bash", "content": "[error] 1 failed"},
    {"role": "assistant", "content": "Fixed: `a - b` became `a + b`; the tests pass. ünïcödé ✓"},
]


@pytest.fixture(scope="module")
def smollm2():
    from transformers import AutoTokenizer

    from engine.loading import embedded_gguf

    gguf = embedded_gguf()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def expected_mask(text: str, offsets, messages: list[dict]) -> list[int]:
    """Independently: a token is trained iff it lies in an assistant turn's content + <|im_end|>."""
    spans, cursor = [], 0
    for m in chat_template.normalise(messages):
        if m["role"] != "assistant":
            continue
        header = "<|im_start|>assistant\n"
        start = text.index(header + m["content"] + "<|im_end|>", cursor) + len(header)
        cursor = start + len(m["content"]) + len("<|im_end|>")
        spans.append((start, cursor))
    return [int(any(a <= s and e <= b for a, b in spans)) for s, e in offsets]


def test_smollm2_round_trip_masks_exactly_the_non_assistant_tokens(smollm2):
    r = Renderer(smollm2, "SmolLM2-135M-Instruct")
    assert r.convention == "hermes-text" and r.marked  # no tools in SmolLM2's template: the text convention
    out = r.render(CONVERSATION)
    ids, mask = out["input_ids"], out["assistant_masks"]
    assert smollm2.decode(ids) == out["text"]
    assert mask == expected_mask(out["text"], out["offsets"], CONVERSATION)
    assert 0 < sum(mask) < len(mask)
    trained = "".join(t for t, m in out["segments"] if m)
    assert '<tool_call>{"name": "Read", "arguments": {"path": "utils.py"}}</tool_call>' in trained
    assert "1 failed" not in trained and "The tests fail" not in trained and "Tools: Bash" not in trained
    assert trained.count("<|im_end|>") == 3  # every assistant turn learns to stop
    assert "".join(t for t, _ in out["segments"]) == out["text"]
    assert r.deep(CONVERSATION, out) == []  # and the template's own {% generation %} mask agrees
    assert r.count(CONVERSATION) == len(ids)


def test_a_template_that_does_not_render_incrementally_is_caught(smollm2):
    tok = copy.deepcopy(smollm2)  # the module's tokenizer stays as it was
    tok.chat_template = ("{{ messages|length }} messages\n{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                         "{{ m['content'] }}<|im_end|>\n{% endfor %}"
                         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    r = Renderer(tok, "odd")
    out = r.render(CONVERSATION)
    problems = r.deep(CONVERSATION, out)
    assert any("incrementally" in p for p in problems)
    assert not any(out["assistant_masks"])  # nothing would be trained: the example is excluded, not mis-masked
