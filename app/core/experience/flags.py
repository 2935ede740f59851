"""Why an answer needs improvement, from the request and the answer alone: an invalid tool call (checked against the
request's tool schemas), an answer cut off at the token limit (it rambled), an empty answer. Each reason in words."""
from __future__ import annotations

from typing import Any

from app.core.toolcalls.convention import as_text
from app.core.toolcalls.schemas import validity

INVALID_CALL, RAMBLED, EMPTY, CLIENT, CONTRADICTED = "invalid_tool_call", "rambled", "empty", "client", "contradicted"
TOOL_FAILED = "tool_failed"  # a captured action of the student's whose tool call failed (datasets/student_work)
KINDS = (INVALID_CALL, RAMBLED, EMPTY, CLIENT, CONTRADICTED, TOOL_FAILED)


def request_tools(request: dict) -> dict[str, dict]:
    """{tool name: JSON schema of its parameters} from an OpenAI `tools` list (unknown shapes are skipped)."""
    out = {}
    for tool in request.get("tools") or []:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            out[fn["name"]] = params if isinstance(params, dict) else {}
    return out


def reason(kind: str, text: str) -> dict[str, str]:
    return {"kind": kind, "text": text}


def needs_improvement(request: dict, answer: dict, finish_reason: str, max_tokens: Any = None) -> list[dict]:
    """The reasons this answer needs improvement ([] when none is visible from the answer alone)."""
    out = []
    text = as_text({"role": "assistant", **answer})["content"]
    schemas = request_tools(request)
    attempted, valid, why = validity(text, set(schemas), schemas)
    if attempted > valid:
        out.append(reason(INVALID_CALL, f"{attempted - valid} of {attempted} tool calls invalid: {'; '.join(why)}"))
    if finish_reason == "length":
        limit = f" ({max_tokens} tokens)" if max_tokens else ""
        out.append(reason(RAMBLED, f"the answer ran to the token limit{limit} without ending its turn"))
    if not text.strip():
        out.append(reason(EMPTY, "the answer is empty"))
    return out
