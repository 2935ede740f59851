"""Training chat templates: the model's own rendering plus {% generation %} markers, so loss falls on assistant tokens.

Tool calls travel in ONE convention (Hermes/Qwen style) when a template has no `tools` support:
an assistant message's tool_calls become `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` text and
tool results keep the `tool` role.
"""
from __future__ import annotations

import json
import re

from app.core.toolcalls.convention import as_text

CHATML_START = "<|im_start|>"
_DEFAULT_SYSTEM = re.compile(r"loop\.first and messages\[0\]\['role'\] != 'system'.*?<\|im_start\|>system\\n(.*?)<\|im_end\|>",
                             re.S)

CHATML_TRAINING = (
    "{%- for message in messages %}"
    "{%- if loop.first and messages[0]['role'] != 'system' and default_system %}"
    "{{ '<|im_start|>system\\n' + default_system + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\\n' }}"
    "{%- else %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)


def has_generation_markers(template: str | None) -> bool:
    return bool(template) and "{% generation %}" in template.replace("{%-", "{%").replace("-%}", "%}")


def training_template(template: str | None) -> str | None:
    """A template with generation markers that renders like `template`; None when we know no such template."""
    if has_generation_markers(template):
        return template
    if template and CHATML_START in template and "message['content']" in template:
        match = _DEFAULT_SYSTEM.search(template)
        system = match.group(1) if match else ""
        return CHATML_TRAINING.replace("default_system", json.dumps(system))
    return None


def tool_calls_as_text(message: dict) -> dict:
    """Render an OpenAI-style assistant message's tool_calls into its content (Hermes convention, one implementation
    in app.core.toolcalls shared by dataset building, pairs, evaluation and export)."""
    return as_text(message)


def normalise(messages: list[dict]) -> list[dict]:
    """Plain {role, content} messages with tool calls in the text convention."""
    return [tool_calls_as_text(m) if m.get("tool_calls") else {"role": m["role"], "content": m.get("content") or ""}
            for m in messages]
