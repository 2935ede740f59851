"""How the student decodes, one home for judging and serving: greedy for judging, a repetition penalty over the last
generated tokens (llama.cpp's `repeat_penalty` / `penalty_last_n`, mirrored in transformers by a logits processor), and
an answer that ends at its first closing </tool_call> tag. The evaluators and the model server read these values, so
the gate measures what clients see."""
from __future__ import annotations

TOOL_END = "</tool_call>"
REPEAT_PENALTY = 1.1  # llama-cpp-python's server default too; 1.0 switches it off
PENALTY_LAST_N = 64  # generated tokens the penalty looks back over (llama.cpp counts generated tokens, not the prompt)


def llama_kwargs(repeat_penalty: float = REPEAT_PENALTY) -> dict:
    """The llama.cpp sampling arguments of a judged (greedy) answer."""
    return {"temp": 0.0, "repeat_penalty": repeat_penalty}


def end_at_tool_call(text: str) -> tuple[str, bool]:
    """The answer up to and including its first closing tag, and whether it had one (an answer ends there: what a model
    writes after its call is never run)."""
    at = text.find(TOOL_END)
    return (text, False) if at < 0 else (text[:at + len(TOOL_END)], True)
