"""The chat template a shipped model carries: the base model's own template, preceded (when that template has no tool
support) by a prelude that writes OpenAI `tool_calls` into the text exactly as training did
(`app.core.toolcalls.as_text`: `<tool_call>{"name": …, "arguments": …}</tool_call>`, one per line after the
content). Embedded in the GGUF, written into the Ollama Modelfile's source, checked against the training renderer."""
from __future__ import annotations

import re

# Rewrites `messages` before the base template runs. Argument objects are dumped like json.dumps (ASCII escapes, key
# order kept); argument strings (the OpenAI wire form) are inserted as they are.
TOOL_PRELUDE = (
    "{%- set ns = namespace(msgs=[]) -%}"
    "{%- for m in messages -%}"
    "{%- set t = namespace(text=(m['content'] if m['content'] is string else '')) -%}"
    "{%- if m['tool_calls'] is defined and m['tool_calls'] -%}"
    "{%- for call in m['tool_calls'] -%}"
    "{%- set fn = call['function'] if call['function'] is defined else call -%}"
    "{%- set args = fn['arguments'] if fn['arguments'] is string else (fn['arguments'] | tojson(ensure_ascii=True)) -%}"
    "{%- set block = '<tool_call>{\"name\": ' ~ (fn['name'] | tojson(ensure_ascii=True)) ~ ', \"arguments\": ' ~ args"
    " ~ '}</tool_call>' -%}"
    "{%- set t.text = (t.text ~ '\\n' ~ block) if t.text else block -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- set ns.msgs = ns.msgs + [{'role': m['role'], 'content': t.text}] -%}"
    "{%- endfor -%}"
    "{%- set messages = ns.msgs -%}"
)
# A conversation with tool calls every export renders through both templates (they must agree byte for byte).
PROBE = [
    {"role": "system", "content": "You are a coding agent. Tools: Bash, Edit."},
    {"role": "user", "content": "Run the tests & fix what fails <please>."},
    {"role": "assistant", "content": "Let me run them.",
     "tool_calls": [{"type": "function", "function": {"name": "Bash", "arguments": {"command": "pytest -x && echo ok"}}}]},
    {"role": "tool", "content": "1 failed: test_add"},
    {"role": "assistant", "content": None,
     "tool_calls": [{"type": "function", "function": {"name": "Edit", "arguments": {"path": "add.py", "line": 3}}},
                    {"type": "function", "function": {"name": "Bash", "arguments": "{\"command\": \"pytest\"}"}}]},
    {"role": "tool", "content": "2 passed"},
    {"role": "assistant", "content": "Fixed: add() returned a - b."},
]
MARKER = "{#- nightschool: tool calls as <tool_call> text -#}"
_END_OF_TURN = re.compile(r"<\|im_end\|>|<\|eot_id\|>|<end_of_turn>|<\|end\|>|<\|endoftext\|>|</s>")


def supports_tools(template: str | None) -> bool:
    """The same test as the training renderer (engine.render.supports_tools)."""
    return bool(template) and "tools" in template and "tool_calls" in template


def export_template(template: str) -> str:
    """The template to ship: native tool templates unchanged, others with the tool-call prelude (idempotent)."""
    if supports_tools(template) or template.startswith(MARKER):
        return template
    return MARKER + TOOL_PRELUDE + template


def stop_strings(template: str, eos_token: str | None = None) -> list[str]:
    """End-of-turn markers the template writes (and the tokenizer's eos): what a runtime must stop on."""
    found = list(dict.fromkeys(_END_OF_TURN.findall(template)))
    if eos_token and eos_token not in found:
        found.insert(0, eos_token)
    return found
