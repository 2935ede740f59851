"""Next-action agreement and tool-call validity of one generated answer against the teacher's recorded action.

Outcomes: `agree` (teacher called a tool: the student's first call names the same tool with valid arguments and, for
edits and shell commands, a close argument; teacher answered in text: the student answered in text too),
`other_args` (same tool, arguments not close), `invalid_args` (same tool, arguments not matching its schema),
`other_tool`, `invalid_call` (a `<tool_call>` block that does not parse, or names no tool), `no_call` (teacher called a
tool, the student only wrote text), `unexpected_call` (teacher answered, the student called a tool) and `rambling`
(teacher answered, the student's text ran into the token limit or was empty)."""
from __future__ import annotations

from dataclasses import dataclass, field

from app.core.toolcalls import schemas
from app.core.toolcalls.agreement import close_arguments
from app.core.toolcalls.convention import message_calls, parse_student
from app.core.toolcalls.schemas import validity

OUTCOMES = ("agree", "other_args", "invalid_args", "other_tool", "invalid_call", "no_call", "unexpected_call",
            "rambling")
OUTCOME_WORDS = {"agree": "agrees with the teacher", "other_args": "same tool, other arguments",
                 "invalid_args": "same tool, arguments its schema refuses", "other_tool": "another tool",
                 "invalid_call": "a tool call that does not parse", "no_call": "no tool call: text only",
                 "unexpected_call": "a tool call where the teacher answered",
                 "rambling": "an answer that did not end"}  # each outcome as a person reads it


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
