"""How the student decodes, one home for judging and serving: greedy for judging, a repetition penalty over the last
generated tokens (llama.cpp's `repeat_penalty` / `penalty_last_n`, mirrored in transformers by a logits processor), and
an answer that ends at its first closing </tool_call> tag, and, where the request names tools, a grammar that lets a
`<tool_call>` once opened close only as a valid call of one of them (toolcalls/grammar.py). The evaluators and the
model server read these values, so the gate measures what clients see."""
from __future__ import annotations

from collections.abc import Mapping

from app.core.toolcalls import grammar

TOOL_END = "</tool_call>"
REPEAT_PENALTY = 1.1  # llama-cpp-python's server default too; 1.0 switches it off
PENALTY_LAST_N = 64  # generated tokens the penalty looks back over (llama.cpp counts generated tokens, not the prompt)
GRAMMAR = True  # tool calls under the request's tool grammar (EvalSettings.grammar; the server's --grammar)


def llama_kwargs(repeat_penalty: float = REPEAT_PENALTY) -> dict:
    """The llama.cpp sampling arguments of a judged (greedy) answer."""
    return {"temp": 0.0, "repeat_penalty": repeat_penalty}


def end_at_tool_call(text: str) -> tuple[str, bool]:
    """The answer up to and including its first closing tag, and whether it had one (an answer ends there: what a model
    writes after its call is never run)."""
    at = text.find(TOOL_END)
    return (text, False) if at < 0 else (text[:at + len(TOOL_END)], True)


def tool_grammar(tools: Mapping[str, dict | None], after_open: bool = False) -> str | None:
    """The GBNF an answer decodes under for these tools ({name: arguments schema or None}); None without tools (free
    text is not constrained). The judge passes a context's tools, the server a request's `tools`. `after_open`: the
    grammar of what follows a written `<tool_call>` (how both decode: free text runs unconstrained until the tag,
    engine/workers/tool_grammar.generate)."""
    return grammar.gbnf(tools, after_open) if tools else None


def context_tools(names, tool_schemas: Mapping[str, dict]) -> dict[str, dict | None]:
    """A judged context's tools as a request names them: the system message's tool names with the schemas inferred for
    the held-out set (None where none was)."""
    return {name: tool_schemas.get(name) for name in names}
