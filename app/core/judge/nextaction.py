"""Next-action agreement and tool-call validity of one generated answer against the teacher's recorded action.

Outcomes: `agree` (teacher called a tool: the student's first call names the same tool with valid arguments and, for
edits and shell commands, a close argument; teacher answered in text: the student answered in text too),
`other_args` (same tool, arguments not close), `invalid_args` (same tool, arguments not matching its schema),
`other_tool`, `invalid_call` (a `<tool_call>` block that does not parse, or names no tool), `no_call` (teacher called a
tool, the student only wrote text), `unexpected_call` (teacher answered, the student called a tool) and `rambling`
(teacher answered, the student's text ran into the token limit or was empty)."""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from app.core.datasets.agreement import parse_student
from app.core.judge import schemas
from app.core.rewards_context import (SHELL_TOOLS, WRITE_WORDS, call_path, message_calls, name_words,
                                      shell_command)

OUTCOMES = ("agree", "other_args", "invalid_args", "other_tool", "invalid_call", "no_call", "unexpected_call",
            "rambling")
COMMAND_RATIO = 0.8  # shell commands this similar (difflib ratio) are close even with another program
_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")


@dataclass
class Judged:
    """One case: the outcome, whether it counts as agreement, and the student's tool-call blocks (attempted/valid)."""

    outcome: str
    teacher_tool: bool = False  # the teacher's action was a tool call
    attempted: int = 0
    valid: int = 0
    why: list[str] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        return self.outcome == "agree"


def _blocks(text: str) -> tuple[list[str], int]:
    """Closed block bodies, and how many blocks were attempted (an unclosed or stray tag counts as one)."""
    bodies = _BLOCK.findall(text)
    return bodies, max(len(bodies), text.count("<tool_call>"), text.count("</tool_call>"))


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
    return schemas.problems(args, tool_schemas.get(name))


def validity(text: str, tools: set[str], tool_schemas: dict[str, dict]) -> tuple[int, int, list[str]]:
    """(blocks attempted, blocks valid, the first problems) of a generated answer."""
    bodies, attempted = _blocks(text)
    why, valid = [], 0
    for body in bodies:
        found = block_problems(body.strip(), tools, tool_schemas)
        valid += not found
        why += found
    if attempted > len(bodies):
        why.append("an unclosed <tool_call> tag")
    return attempted, valid, why[:3]


def _program(command: str) -> str:
    """The program a shell command runs: env assignments and a leading `cd DIR &&` skipped."""
    command = re.sub(r"^\s*cd\s+\S+\s*&&\s*", "", command)
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    words = [w for w in words if not _ENV.match(w)]
    return words[0].rsplit("/", 1)[-1] if words else ""


def close_arguments(name: str, teacher: dict, student: dict) -> bool:
    """Edits: the same file. Shell commands: the same program, or a difflib ratio >= COMMAND_RATIO. Other tools
    (reads, searches): the name is enough."""
    if name.lower() in SHELL_TOOLS:
        a, b = shell_command(teacher.get("arguments") or {}), shell_command(student.get("arguments") or {})
        return _program(a) == _program(b) != "" or SequenceMatcher(None, a, b).ratio() >= COMMAND_RATIO
    if any(w in WRITE_WORDS for w in name_words(name)):
        return call_path(teacher) == call_path(student)
    return True


def judge(teacher: dict, text: str, tools: list[str] | set[str] = (), tool_schemas: dict[str, dict] | None = None,
          finished: bool = True) -> Judged:
    """The outcome of the student's raw answer `text` against the teacher's assistant message. `finished`: the
    generation ended its turn by itself; a text answer that ran into the token limit (rambling) does not agree."""
    tool_schemas = tool_schemas or {}
    attempted, valid, why = validity(text, set(tools), tool_schemas)
    wanted = message_calls(teacher)
    given = [c["function"] for c in parse_student(text).get("tool_calls", [])]
    if not wanted:
        if attempted:
            return Judged("unexpected_call", False, attempted, valid, why)
        if not finished or not text.strip():
            return Judged("rambling", False, 0, 0, ["the answer did not end its turn" if text.strip() else "empty"])
        return Judged("agree", False, 0, 0, [])
    if not attempted:
        return Judged("no_call", True, 0, 0, ["no tool call"])
    if not given:
        return Judged("invalid_call", True, attempted, valid, why or ["no well-formed tool call"])
    first, target = given[0], wanted[0]
    if first["name"] != target["name"]:
        return Judged("other_tool", True, attempted, valid, [f"called {first['name']}, the teacher {target['name']}"])
    if bad := schemas.problems(first["arguments"], tool_schemas.get(first["name"])):
        return Judged("invalid_args", True, attempted, valid, bad)
    if not close_arguments(first["name"], target, first):
        return Judged("other_args", True, attempted, valid,
                      [f"{first['name']} with other arguments than the teacher's"])
    return Judged("agree", True, attempted, valid, why)
