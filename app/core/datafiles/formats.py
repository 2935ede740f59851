"""The one table of dataset formats: the specs we accept (chat, ShareGPT, Alpaca, preference) with their QUICK
per-record checks, the training formats' record checks (chat, preference, RL prompts), every other shape we can name,
and how a record is recognised (a spec, a known-but-unsupported shape, or an agent transcript)."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from app.core.capture.agents import resembled

SHAREGPT_SPEAKERS = {"human", "gpt", "system", "tool", "function_call", "observation"}
SHAREGPT_ROLES = {"user": "human", "assistant": "gpt"}  # role/content turns, mapped onto from/value speakers
ROLES = {"system", "user", "assistant", "tool"}
# Every dataset shape other than chat `messages` that we can name, so a refusal says what a file is:
# (keys that identify it, its name, the spec that accepts a dropped file of it, or None when we cannot train on it).
NAMED_SHAPES = [
    ({"conversations"}, "ShareGPT (`conversations`)", "sharegpt_v1"),
    ({"instruction", "output"}, "Alpaca (`instruction`/`input`/`output`)", "alpaca_v1"),
    ({"prompt", "chosen", "rejected"}, "preference pairs (`prompt`/`chosen`/`rejected`)", "preference_v1"),
    ({"prompt", "completion"}, "prompt/completion pairs", None),
    ({"chosen", "rejected"}, "preference pairs without a `prompt`", None),
    ({"question", "answer"}, "question/answer pairs", None),
    ({"input", "output"}, "input/output pairs without an `instruction`", None),
    ({"text"}, "plain text (`text`)", None),
]


@dataclass(frozen=True)
class DatasetSpec:
    """One accepted dataset format: the keys that identify it, an example line and its quick per-record check."""
    name: str
    required: tuple[str, ...]
    example: str
    check: Callable[[dict], str | None]  # why a record (with the required keys) is unusable, or None

    def detect(self, rec: object) -> bool:
        return isinstance(rec, dict) and all(k in rec for k in self.required)

    def keys(self) -> str:
        return "/".join(f"`{k}`" for k in self.required)


# --- training formats: the record checks of a file given to a recipe ---------------------------------------------

def _check_message(i: int, msg: object) -> str | None:
    if not isinstance(msg, dict):
        return f"message {i} is not an object"
    role = msg.get("role")
    if role not in ROLES:
        return f"message {i} has role {role!r}; expected one of {sorted(ROLES)}"
    content = msg.get("content")
    if content is None and not msg.get("tool_calls"):
        return f"message {i} ({role}) has no content"
    if content is not None and not isinstance(content, str):
        return f"message {i} ({role}) content is {type(content).__name__}, expected a string"
    return None


def check_record(rec: object) -> str | None:
    """Why a parsed line is not a usable chat record, or None when it is."""
    if not isinstance(rec, dict):
        return f"a line must be a JSON object, got {type(rec).__name__}"
    msgs = rec.get("messages")
    if msgs is None:
        return f"no `messages` field (fields: {', '.join(sorted(rec)[:6]) or 'none'})"
    if not isinstance(msgs, list) or not msgs:
        return "`messages` must be a non-empty list"
    for i, msg in enumerate(msgs):
        if problem := _check_message(i, msg):
            return problem
    if not any(m["role"] == "assistant" and (m.get("content") or m.get("tool_calls")) for m in msgs):
        return "no assistant message with content: there is nothing to learn from"
    return None


def check_preference_record(rec: object) -> str | None:
    """Why a parsed line is not a usable preference pair (`prompt`, `chosen`, `rejected`), or None."""
    if not isinstance(rec, dict):
        return f"a line must be a JSON object, got {type(rec).__name__}"
    missing = [k for k in ("prompt", "chosen", "rejected") if k not in rec]
    if missing:
        return f"no {', '.join(f'`{k}`' for k in missing)} field (fields: {', '.join(sorted(rec)[:6]) or 'none'})"
    return check_preference(rec)


CHECKS = {"chat": check_record, "preference": check_preference_record, "prompts": check_record}
EXAMPLE_LINES = {"chat": '{"messages": [{"role": "user", ...}, {"role": "assistant", ...}]}',
          "prompts": '{"messages": [...]} (RL prompts are cut before each assistant turn)',
          "preference": '{"prompt": ..., "chosen": ..., "rejected": ...} (strings or message lists)'}



# --- quick checks, one per spec ---------------------------------------------------------------------------------

def type_name(value: object) -> str:
    """A JSON-ish name for a value's type (for messages)."""
    return "null" if value is None else type(value).__name__


def _text_of(i: int, content: object) -> object:
    """A list of text content parts joined into one string; other content returned as it is."""
    if not isinstance(content, list):
        return content
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type_name(part)
            raise ValueError(f"message {i} content part {j} is {kind!r}, not a text part: only text is trained on")
        texts.append(part["text"])
    return "".join(texts)


def _plain(msgs: list) -> list:
    """Messages with their content parts joined into strings, so check_record can judge them."""
    return [{**m, "content": _text_of(i, m.get("content"))} if isinstance(m, dict) else m
            for i, m in enumerate(msgs)]


def _arguments_parse(args: object) -> bool:
    if isinstance(args, dict):
        return True
    try:
        json.loads(args)  # type: ignore[arg-type]
        return True
    except (TypeError, ValueError):
        return False


def _tool_calls_problem(i: int, calls: object) -> str | None:
    if not isinstance(calls, list):
        return f"message {i} `tool_calls` is {type_name(calls)}, expected a list"
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"].strip():
            return f"message {i} tool call {j} has no `function` with a `name`"
        if not _arguments_parse(fn.get("arguments")):
            return f"message {i} tool call {j} ({fn['name']}) `arguments` is not valid JSON"
    return None


def _message_problem(i: int, msg: dict) -> str | None:
    """What check_record leaves unchecked: empty turns, tool calls, tool results."""
    role, text = msg["role"], msg.get("content") or ""
    if role == "user" and not text.strip():
        return f"message {i} (user) is empty"
    if role == "assistant" and not text.strip() and not msg.get("tool_calls"):
        return f"message {i} (assistant) has neither content nor tool_calls"
    if role == "tool" and not (isinstance(msg.get("tool_call_id"), str) and msg["tool_call_id"]):
        return f"message {i} (tool) has no `tool_call_id`"
    if msg.get("tool_calls") is not None:
        if role != "assistant":
            return f"message {i} ({role}) has tool_calls; only assistant messages call tools"
        return _tool_calls_problem(i, msg["tool_calls"])
    return None


def check_chat(rec: dict) -> str | None:
    """chat_sft_v1: OpenAI chat `messages` (content a string, null or text parts) with optional tool calls."""
    msgs = rec["messages"]
    try:
        rec = {**rec, "messages": _plain(msgs) if isinstance(msgs, list) else msgs}
    except ValueError as exc:
        return str(exc)
    if problem := check_record(rec):
        return problem
    if "tools" in rec and not isinstance(rec["tools"], list):
        return f"`tools` is {type_name(rec['tools'])}, expected a list"
    return next((p for i, m in enumerate(rec["messages"]) if (p := _message_problem(i, m))), None)


def _speaker(turn: dict) -> object:
    role = turn["from"] if "from" in turn else turn.get("role")
    return SHAREGPT_ROLES.get(role, role) if isinstance(role, str) else role


def _turn_problem(i: int, turn: object) -> str | None:
    if not isinstance(turn, dict):
        return f"turn {i} is not an object"
    speaker, text = _speaker(turn), turn["value"] if "value" in turn else turn.get("content")
    if speaker not in SHAREGPT_SPEAKERS:
        return f"turn {i} is from {speaker!r}; expected one of {sorted(SHAREGPT_SPEAKERS)}"
    if not isinstance(text, str):
        return f"turn {i} ({speaker}) `value` is {type_name(text)}, expected a string"
    if speaker in ("human", "gpt") and not text.strip():
        return f"turn {i} ({speaker}) is empty"
    return None


def check_sharegpt(rec: dict) -> str | None:
    """sharegpt_v1: `conversations` of {from, value} (or {role, content}) turns with at least one gpt turn."""
    turns = rec["conversations"]
    if not isinstance(turns, list) or not turns:
        return "`conversations` must be a non-empty list"
    if problem := next((p for i, t in enumerate(turns) if (p := _turn_problem(i, t))), None):
        return problem
    if not any(_speaker(t) == "gpt" for t in turns):
        return "no `gpt` turn: there is nothing to learn from"
    return None


def _text_problem(key: str, value: object) -> str | None:
    if not isinstance(value, str):
        return f"`{key}` is {type_name(value)}, expected a string"
    return None if value.strip() else f"`{key}` is empty"


def check_alpaca(rec: dict) -> str | None:
    """alpaca_v1: non-empty `instruction` and `output` strings, an optional `input` string."""
    if problem := _text_problem("instruction", rec["instruction"]) or _text_problem("output", rec["output"]):
        return problem
    if rec.get("input") is not None and not isinstance(rec["input"], str):
        return f"`input` is {type_name(rec['input'])}, expected a string"
    return None


def _prompt_messages_problem(msgs: list) -> str | None:
    for i, msg in enumerate(msgs):
        if not isinstance(msg, dict) or msg.get("role") not in ROLES:
            return f"`prompt` message {i} needs a `role` among {sorted(ROLES)}"
        if not isinstance(msg.get("content"), str | list):
            return f"`prompt` message {i} has no text `content`"
    return None


def _side_problem(key: str, value: object) -> str | None:
    """A preference field: a non-empty string or a non-empty list of chat messages."""
    if isinstance(value, str):
        return _text_problem(key, value)
    if not isinstance(value, list) or not value:
        return f"`{key}` is {type_name(value)}, expected a string or a non-empty list of messages"
    if key == "prompt":
        return _prompt_messages_problem(value)
    problem = check_chat({"messages": value})
    return f"`{key}`: {problem}" if problem else None


def check_preference(rec: dict) -> str | None:
    """preference_v1: `prompt`, `chosen` and `rejected` (strings or message lists), chosen differing from rejected."""
    if problem := next((p for k in ("prompt", "chosen", "rejected") if (p := _side_problem(k, rec[k]))), None):
        return problem
    chosen, rejected = rec["chosen"], rec["rejected"]
    if isinstance(chosen, str) and isinstance(rejected, str):
        chosen, rejected = chosen.strip(), rejected.strip()
    return "`chosen` and `rejected` are the same: the pair teaches nothing" if chosen == rejected else None


# The registry: nothing outside it is accepted.
SPECS: dict[str, DatasetSpec] = {s.name: s for s in [
    DatasetSpec("chat_sft_v1", ("messages",),
                '{"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}',
                check_chat),
    DatasetSpec("sharegpt_v1", ("conversations",),
                '{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}]}',
                check_sharegpt),
    DatasetSpec("alpaca_v1", ("instruction", "output"), '{"instruction": "...", "input": "", "output": "..."}',
                check_alpaca),
    DatasetSpec("preference_v1", ("prompt", "chosen", "rejected"),
                '{"prompt": "...", "chosen": "...", "rejected": "..."}', check_preference),
]}


# --- recognising records ----------------------------------------------------------------------------------------

def transcript_kind(rec: object) -> str | None:
    """The agent whose session transcript this record comes from (its title, from capture/agents.py), or None."""
    found = resembled(rec) if isinstance(rec, dict) else None
    return found.title if found else None


def spec_for(rec: object) -> DatasetSpec | None:
    """The registry spec a record belongs to; None for transcripts and unknown schemas (they are denied)."""
    if transcript_kind(rec):
        return None
    # the spec with the most required keys wins (a preference record may carry `messages` too)
    return next((s for s in sorted(SPECS.values(), key=lambda s: -len(s.required)) if s.detect(rec)), None)


def unsupported_shape(rec: object) -> str | None:
    """A dataset shape we know but do not train on, by name."""
    if not isinstance(rec, dict) or transcript_kind(rec):
        return None
    return next((name for keys, name, spec in NAMED_SHAPES if spec is None and keys <= rec.keys()), None)


def shape_name(rec: object) -> str | None:
    """The name of a record's shape when it is not chat `messages` (e.g. "Alpaca (…)"), or None."""
    if not isinstance(rec, dict) or "messages" in rec:
        return None
    return next((name for keys, name, _ in NAMED_SHAPES if keys <= rec.keys()), None)


def accepted_formats() -> str:
    return ", ".join(f"{s.name} ({s.keys()})" for s in SPECS.values())


def record_problem(spec: DatasetSpec, rec: object) -> str | None:
    """Why one parsed record is not usable under spec, or None."""
    if not isinstance(rec, dict):
        return f"a record must be a JSON object, got {type_name(rec)}"
    if missing := [k for k in spec.required if k not in rec]:
        fields = ", ".join(sorted(rec)[:8]) or "none"
        return f"missing {', '.join(f'`{k}`' for k in missing)} (fields: {fields})"
    return spec.check(rec)
