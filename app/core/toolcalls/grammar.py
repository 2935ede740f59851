"""The GBNF grammar a student decodes under when a request names tools: free text, then at most one Hermes call forced to a known tool and its arguments' schema."""
from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
MAX_RULES = 400  # a tool whose arguments need more rules than this is held to any JSON object (compile cost)

# JSON as llama.cpp's own json.gbnf writes it, with bounded whitespace (a model cannot loop on spaces) and numbers of
# at most 16 digits before the point.
JSON_RULES = r'''ws ::= | " " | "\n" [ \t]{0,8}
j-value ::= j-object | j-array | j-string | j-number | "true" | "false" | "null"
j-object ::= "{" ws ( j-member ( "," ws j-member )* )? "}"
j-member ::= j-string ws ":" ws j-value ws
j-array ::= "[" ws ( j-value ws ( "," ws j-value ws )* )? "]"
j-string ::= "\"" j-char* "\""
j-char ::= [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
j-integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
j-number ::= j-integer ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?'''
SIMPLE = {"string": "j-string", "integer": "j-integer", "number": "j-number", "boolean": '( "true" | "false" )',
          "null": '"null"'}
UNSUPPORTED = ("$ref", "allOf", "not", "if", "patternProperties", "dependentSchemas", "$defs", "definitions")


class Unsupported(ValueError):
    """A schema keyword the grammar does not express: that tool's arguments are held to any JSON object instead."""


def literal(text: str) -> str:
    """A GBNF string literal matching `text` exactly."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _char_class(chars: str, negate: bool = False) -> str:
    escaped = "".join(sorted(set(chars)))  # the tags' characters: none needs an escape in a class
    return "[" + ("^" if negate else "") + escaped + "]"


def free_text_rules() -> list[str]:
    """Rules `text-N`: any text that never contains `<tool_call>` nor `</tool_call>` (a DFA over the two tags, one rule
    per state, every state may end the answer); completing `<tool_call>` goes on to the `call` rule, and `</tool_call>`
    cannot be completed. Everything else, `<` and code included, stays allowed."""
    states = sorted({p[:i] for p in (OPEN, CLOSE) for i in range(len(p))}, key=lambda s: (len(s), s))
    index = {s: n for n, s in enumerate(states)}
    alphabet = sorted(set(OPEN + CLOSE))
    rules = []
    for state in states:
        targets: dict[str, list[str]] = {}
        for ch in alphabet:
            nxt = state + ch
            if nxt == OPEN:
                targets.setdefault("call", []).append(ch)
            elif nxt != CLOSE:  # the closing tag can never be written as text
                back = next(nxt[i:] for i in range(len(nxt) + 1) if nxt[i:] in index)
                targets.setdefault(f"text-{index[back]}", []).append(ch)
        alts = [""] + [f"{_char_class(chs)} {target}" for target, chs in targets.items()]
        alts.append(f"{_char_class(''.join(alphabet), negate=True)} text-0")
        rules.append(f"text-{index[state]} ::= " + " | ".join(alts))
    return rules


class _Tool:
    """The rules of one tool's arguments: a schema turned into GBNF, rule names under `prefix`."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.rules, self.count = prefix, [], 0

    def rule(self, body: str) -> str:
        self.count += 1
        if self.count > MAX_RULES:
            raise Unsupported(f"more than {MAX_RULES} rules")
        name = f"{self.prefix}-{self.count}"
        self.rules.append(f"{name} ::= {body}")
        return name

    def value(self, schema: Any) -> str:
        if schema is True or not isinstance(schema, dict) or not schema:
            return "j-value"
        if found := [k for k in UNSUPPORTED if k in schema]:
            raise Unsupported(f"the keyword {found[0]}")
        if "const" in schema:
            return literal(json.dumps(schema["const"]))
        if "enum" in schema:
            return "( " + " | ".join(literal(json.dumps(v)) for v in schema["enum"]) + " )"
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                return "( " + " | ".join(self.value(s) for s in schema[key]) + " )"
        kinds = schema.get("type")
        kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
        if not kinds:
            kinds = ["object"] if "properties" in schema else ["array"] if "items" in schema else []
        if not kinds:
            return "j-value"
        alts = []
        for kind in kinds:
            if kind in SIMPLE:
                alts.append(SIMPLE[kind])
            elif kind == "array":
                alts.append(self.array(schema.get("items")))
            elif kind == "object":
                alts.append(self.object(schema))
            else:
                raise Unsupported(f"the type {kind!r}")
        return alts[0] if len(alts) == 1 else "( " + " | ".join(alts) + " )"

    def array(self, items: Any) -> str:
        if not isinstance(items, dict) or not items:
            return "j-array"
        item = self.value(items)
        return self.rule(f'"[" ws ( {item} ws ( "," ws {item} ws )* )? "]"')

    def object(self, schema: dict) -> str:
        """The declared properties in the schema's order, each once, the required ones present; no others."""
        props = schema.get("properties")
        if not isinstance(props, dict) or not props:
            return "j-object"
        required = set(schema.get("required") or [])
        members = [(f'{literal(json.dumps(k))} ws ":" ws {self.value(v)} ws', k in required) for k, v in props.items()]
        memo: dict[tuple[int, bool], str] = {}

        def rest(j: int, first: bool) -> str:  # members j.. after none (first) or some were written
            if j == len(members):
                return ""
            if (j, first) not in memo:
                member, needed = members[j]
                this = ("" if first else '"," ws ') + member + (" " + rest(j + 1, False) if j + 1 < len(members) else "")
                skip = rest(j + 1, first) if not needed else None
                body = this if needed else (f"( {this} )?" if not skip else f"{this} | {skip}")
                memo[(j, first)] = self.rule(body)
            return memo[(j, first)]

        return self.rule(f'"{{" ws {rest(0, True)} "}}"')


def arguments_rules(prefix: str, schema: Any) -> tuple[str, list[str], str]:
    """(the arguments' rule expression, its rules, why it fell back to any JSON object or "") for one tool."""
    if not isinstance(schema, dict) or not schema.get("properties"):
        plain = not schema or (isinstance(schema, dict) and schema.get("type") in ("object", None))
        return "j-object", [], "" if plain else "not an object schema"
    tool = _Tool(prefix)
    try:
        return tool.value(schema), tool.rules, ""
    except (Unsupported, TypeError, ValueError, RecursionError) as exc:
        return "j-object", [], str(exc)


def tools_of(request_tools: Any) -> dict[str, dict | None]:
    """{name: parameters schema or None} of an OpenAI-style `tools` list ([{type: function, function: {name,
    parameters}}], or bare functions); malformed entries are skipped."""
    out: dict[str, dict | None] = {}
    for tool in request_tools or []:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"].strip():
            params = fn.get("parameters")
            out[fn["name"]] = params if isinstance(params, dict) else None
    return out


def gbnf(tools: Mapping[str, dict | None], after_open: bool = False) -> str:
    """The grammar for a request's tools ({name: its arguments' JSON schema or None}): free text, and a `<tool_call>`
    once opened is forced to `{"name": <one of the tools>, "arguments": <its schema>}</tool_call>`. `after_open`: only
    what follows an opening tag already written (the call and its closing tag: a lazy grammar, applied once the tag
    is there, leaves free text unconstrained and as fast as without one). No tools: a call needs at least one tool.
    Cached by the tool set."""
    if not tools:
        raise ValueError("a tool-call grammar needs at least one tool: without tools the answer is not constrained")
    key = json.dumps(sorted(tools.items(), key=lambda t: t[0]), default=str)  # a schema's property order matters
    return _gbnf(key, after_open)


@lru_cache(maxsize=64)
def _gbnf(key: str, after_open: bool = False) -> str:
    tools = json.loads(key)
    rules, names = [], []
    for n, (name, schema) in enumerate(tools):
        args, extra, _why = arguments_rules(f"t{n}", schema)
        rules += extra
        rules.append(f'tool-{n} ::= {literal(json.dumps(name))} ws "," ws "\\"arguments\\"" ws ":" ws {args} ws')
        names.append(f"tool-{n}")
    named = " | ".join(names)
    head = ["root ::= call" if after_open else "root ::= text-0",
            f'call ::= ws "{{" ws "\\"name\\"" ws ":" ws ( {named} ) "}}" ws {literal(CLOSE)}']
    return "\n".join(head + ([] if after_open else free_text_rules()) + rules + [JSON_RULES]) + "\n"


def fallbacks(tools: Mapping[str, dict | None]) -> dict[str, str]:
    """{tool: why its arguments are held to any JSON object} for the tools whose schema the grammar does not express."""
    return {name: why for n, (name, schema) in enumerate(sorted(tools.items(), key=lambda t: t[0]))
            if (why := arguments_rules(f"t{n}", schema)[2])}
