"""Tool schemas for validity checks: transcripts do not record the agent's real tool schemas, so each tool's schema is
inferred from the teacher's own calls (argument names and JSON types; required = present in every call) and checked
with jsonschema."""
from __future__ import annotations

from typing import Any, Iterable

from jsonschema import Draft202012Validator

_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"),
          (dict, "object"), (type(None), "null"))


def json_type(value: Any) -> str:
    for kind, name in _TYPES:
        if isinstance(value, kind):
            return name
    return "string"


def infer(calls: Iterable[dict]) -> dict[str, dict]:
    """{tool name: JSON schema} from [{name, arguments}] calls: every argument the teacher ever used is allowed with
    the types it had (integer widened to number), arguments in every call are required, nothing else is allowed."""
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
                     "properties": {k: {"type": _widen(sorted(t))} for k, t in sorted(props.items())}}
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
