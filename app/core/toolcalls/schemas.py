"""Tool schemas for validity checks: transcripts do not record the agent's real tool schemas, so each tool's schema is
inferred from the teacher's own calls (argument names and JSON types; required = present in every call) and checked
with jsonschema."""
from __future__ import annotations

import json
from typing import Any, Iterable

from jsonschema import Draft202012Validator

from app.core.toolcalls.convention import blocks, parse_call

_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"),
          (dict, "object"), (type(None), "null"))


def json_type(value: Any) -> str:
    for kind, name in _TYPES:
        if isinstance(value, kind):
            return name
    return "string"


def infer(calls: Iterable[dict]) -> dict[str, dict]:
    """{tool name: JSON schema} from [{name, arguments}] calls: every argument the teacher ever used is allowed with
    the types it had (integer widened to number), arguments in every call are required, nothing else is allowed. The
    properties keep the order the teacher first wrote them in (a tool-call grammar asks for them in that order)."""
    seen: dict[str, list[dict]] = {}
    for call in calls:
        args = call.get("arguments")
        if isinstance(call.get("name"), str) and isinstance(args, dict):
            seen.setdefault(call["name"], []).append(args)
    out = {}
    for name, uses in seen.items():
        props: dict[str, set[str]] = {}
        for args in uses:
            for key, value in args.items():
                props.setdefault(key, set()).add(json_type(value))
        required = sorted(set.intersection(*(set(a) for a in uses))) if uses else []
        out[name] = {"type": "object", "additionalProperties": False, "required": required,
                     "properties": {k: {"type": _widen(sorted(t))} for k, t in props.items()}}
    return out


def _widen(types: list[str]) -> list[str]:
    return sorted(set(types) | ({"number"} if "integer" in types else set()) | ({"integer"} if "number" in types
                                                                               else set()))


def problems(arguments: Any, schema: dict | None) -> list[str]:
    """Why the arguments do not match the schema ([] when they do, or when the tool's schema is unknown)."""
    if not isinstance(arguments, dict):
        return ["the arguments are not a JSON object"]
    if not schema:
        return []
    return [e.message for e in Draft202012Validator(schema).iter_errors(arguments)][:3]


def block_problems(body: str, tools: set[str], tool_schemas: dict[str, dict]) -> list[str]:
    """Why one `<tool_call>` body is not a valid call: JSON, a name that exists, arguments matching the schema."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return [f"not JSON ({exc.msg})"]
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"].strip():
        return ["no tool name"]
    name = obj["name"].strip()
    if tools and name not in tools:
        return [f"no tool named {name!r}"]
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return ["the arguments are not JSON"]
    return problems(args, tool_schemas.get(name))


def validity(text: str, tools: set[str], tool_schemas: dict[str, dict]) -> tuple[int, int, list[str]]:
    """(blocks attempted, blocks valid, the first problems) of a generated answer."""
    bodies, attempted = blocks(text)
    why, valid = [], 0
    for body in bodies:
        found = block_problems(body.strip(), tools, tool_schemas)
        valid += not found
        why += found
    if attempted > len(bodies):
        why.append("an unclosed <tool_call> tag")
    return attempted, valid, why[:3]


def well_formed(body: str, tools: set[str]) -> bool:
    """The behavioural reward's lighter check of one block (no schema): a named call to a known tool whose arguments
    are a JSON object (or a JSON-encoded one). block_problems is the judge's full check."""
    call = parse_call(body.strip())
    if call is None:
        return False
    raw = json.loads(body)
    args = raw.get("arguments", raw.get("parameters"))
    if isinstance(args, str):  # a JSON-encoded object is accepted, as agreement's parser accepts it
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return False
    return isinstance(args, dict) and (not tools or call["name"] in tools)
