"""Next-action agreement and tool-call validity of one generated answer against the teacher's recorded action.

Outcomes: `agree` (teacher called a tool: the student's first call names the same tool with valid arguments and, for
edits and shell commands, a close argument; teacher answered in text: the student answered in text too),
`other_args` (same tool, arguments not close), `invalid_args` (same tool, arguments not matching its schema),
`other_tool`, `invalid_call` (a `<tool_call>` block that does not parse, or names no tool), `no_call` (teacher called a
tool, the student only wrote text), `unexpected_call` (teacher answered, the student called a tool) and `rambling`
(teacher answered, the student's text ran into the token limit or was empty), `cut_call` (the answer limit cut the
student's call before it decided: its name, or the path of an edit or the command of a shell call, unfinished).

A call the answer limit cut is the judge's budget, not the student's fault, so it counts for neither side of validity
(a call that ends repeating itself is a loop, not cut: it never closes, and stays `invalid_call`),
and it is judged on what it had decided when it was cut: a finished name other than the teacher's is `other_tool`;
the teacher's tool is `agree` when the name is enough (reads, searches, lists), and for an edit when its finished path
is the teacher's (`other_args` when it is another); a shell command is never judged unfinished."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.core.toolcalls import schemas
from app.core.toolcalls.actions import SHELL_TOOLS, WRITE_WORDS, call_path, name_words
from app.core.toolcalls.agreement import close_arguments
from app.core.toolcalls.convention import cut_call, message_calls, parse_student
from app.core.toolcalls.schemas import validity

RULES_VERSION = 2  # 2: a call the answer limit cut is judged on what it decided, and is not an invalid call
OUTCOMES = ("agree", "other_args", "invalid_args", "other_tool", "invalid_call", "no_call", "unexpected_call",
            "rambling", "cut_call")
OUTCOME_WORDS = {"agree": "agrees with the teacher", "other_args": "same tool, other arguments",
                 "invalid_args": "same tool, arguments its schema refuses", "other_tool": "another tool",
                 "invalid_call": "a tool call that does not parse", "no_call": "no tool call: text only",
                 "unexpected_call": "a tool call where the teacher answered",
                 "rambling": "an answer that did not end",
                 "cut_call": "a tool call the answer limit cut before it decided"}  # each outcome as a person reads it


@dataclass
class Judged:
    """One case: the outcome, whether it counts as agreement, and the student's tool-call blocks (attempted/valid)."""

    outcome: str
    teacher_tool: bool = False  # the teacher's action was a tool call
    attempted: int = 0
    valid: int = 0
    why: list[str] = field(default_factory=list)
    cut: int = 0  # calls the answer limit cut (0 or 1): in neither `attempted` nor `valid`
    same_tool: bool = False  # the student's first call names the teacher's first tool (tool agreement)

    @property
    def agree(self) -> bool:
        return self.outcome == "agree"


def judge(teacher: dict, text: str, tools: list[str] | set[str] = (), tool_schemas: dict[str, dict] | None = None,
          finished: bool = True) -> Judged:
    """The outcome of the student's raw answer `text` against the teacher's assistant message. `finished`: the
    generation ended its turn by itself; a text answer that ran into the token limit (rambling) does not agree."""
    tool_schemas = tool_schemas or {}
    attempted, valid, why = validity(text, set(tools), tool_schemas)
    cut = None if finished or loops(text) else cut_call(text)
    if cut is not None:  # the unclosed block is the limit's, not a call that does not parse
        attempted -= 1
        why = [w for w in why if w != "an unclosed <tool_call> tag"]
    wanted = message_calls(teacher)
    given = [c["function"] for c in parse_student(text).get("tool_calls", [])]
    was_cut = int(cut is not None)
    if not wanted:
        if attempted or cut is not None:
            return Judged("unexpected_call", False, attempted, valid, why, was_cut)
        if not finished or not text.strip():
            return Judged("rambling", False, 0, 0, ["the answer did not end its turn" if text.strip() else "empty"])
        return Judged("agree", False, 0, 0, [])
    if not attempted and cut is None:
        return Judged("no_call", True, 0, 0, ["no tool call"])
    target = wanted[0]
    if not given and cut is not None:
        return _judge_cut(cut, target, attempted, valid)
    if not given:
        return Judged("invalid_call", True, attempted, valid, why or ["no well-formed tool call"], was_cut)
    first = given[0]
    if first["name"] != target["name"]:
        return Judged("other_tool", True, attempted, valid, [f"called {first['name']}, the teacher {target['name']}"],
                      was_cut)
    if bad := schemas.problems(first["arguments"], tool_schemas.get(first["name"])):
        return Judged("invalid_args", True, attempted, valid, bad, was_cut, True)
    if not close_arguments(first["name"], target, first):
        return Judged("other_args", True, attempted, valid,
                      [f"{first['name']} with other arguments than the teacher's"], was_cut, True)
    return Judged("agree", True, attempted, valid, why, was_cut, True)


LOOP = re.compile(r"(.{2,60}?)\1{3,}$", re.S)  # a piece said four times or more in a row at the very end


def loops(text: str) -> bool:
    """The answer ends repeating itself (`-D lib -D lib -D lib …`, `go/go/go/…`) over at least 40 characters: a call
    in a loop never closes, whatever the limit, so the limit did not cut it: it is invalid."""
    tail = text[-600:]
    found = LOOP.search(tail)
    return found is not None and len(tail) - found.start() >= 40


def _judge_cut(cut: dict, target: dict, attempted: int, valid: int) -> Judged:
    """The teacher called a tool; the student's only call was cut by the answer limit: judged on what it decided."""
    name = cut.get("name")
    limit = "cut by the answer limit"
    if name is None:
        return Judged("cut_call", True, attempted, valid, [f"{limit} before its name"], 1)
    if name != target["name"]:
        return Judged("other_tool", True, attempted, valid, [f"called {name} ({limit}), the teacher {target['name']}"],
                      1)
    words = name_words(name)
    path_decides = any(w in WRITE_WORDS for w in words) and call_path(target) is not None
    if name.lower() in SHELL_TOOLS or (path_decides and call_path(cut) is None):
        return Judged("cut_call", True, attempted, valid, [f"{name}, {limit} before its arguments decided"], 1, True)
    if not close_arguments(name, target, cut):
        return Judged("other_args", True, attempted, valid, [f"{name} with other arguments than the teacher's ({limit})"],
                      1, True)
    return Judged("agree", True, attempted, valid, [limit], 1, True)
