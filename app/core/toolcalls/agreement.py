"""Two meanings of "the student did what the teacher did", side by side.

- exact_agreement: the same tool calls (names and arguments, by meaning) in the same order, or the same text answer.
  Used to MINE preference pairs: only an answer that differs from the teacher's becomes a (teacher, student) pair,
  so a near miss with other arguments is a useful pair.
- close_arguments: the judge's next-action agreement (what the gate counts) compares the FIRST call's tool and,
  for shell commands and edits only, how close its arguments are: a student that runs `pytest -x` where the
  teacher ran `pytest -q` did the same next action."""
from __future__ import annotations

import re
import shlex
from difflib import SequenceMatcher
from typing import Any

from app.core.toolcalls.actions import SHELL_TOOLS, WRITE_WORDS, call_path, name_words, shell_command
from app.core.toolcalls.convention import arguments_of, text_of

AGREE_RATIO = 0.9  # text answers this similar (difflib ratio, whitespace normalised) count as the same answer
COMMAND_RATIO = 0.8  # shell commands this similar (difflib ratio) are close even with another program
_THINK = re.compile(r"<think>.*?</think>", re.S)
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")


# --- exact: which answers become preference pairs ----------------------------------------------------------------

def _norm_value(value: Any) -> Any:
    """JSON values compared by meaning: key order, 1 vs 1.0, surrounding whitespace of strings do not matter."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _norm_value(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_norm_value(v) for v in value)
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return value


def call_keys(message: dict) -> list[tuple[str, Any]]:
    """(name, arguments normalised) of each tool call: what exact agreement compares."""
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call)
        out.append(((fn.get("name") or "").strip(), _norm_value(arguments_of(fn.get("arguments")))))
    return out


def _answer(message: dict) -> str:
    """The visible answer, whitespace normalised; thinking aside unless there is nothing else."""
    text = text_of(message.get("content"))
    visible = " ".join(_THINK.sub(" ", text).split())
    return visible or " ".join(text.split())


def exact_agreement(teacher: dict, student: dict) -> bool:
    """The same action: the same tool calls (names and arguments) in the same order; or, when neither calls a tool,
    the same text (whitespace normalised, thinking aside) or a difflib ratio of at least AGREE_RATIO."""
    mine, theirs = call_keys(teacher), call_keys(student)
    if mine or theirs:
        return mine == theirs
    a, b = _answer(teacher), _answer(student)
    if a == b:
        return True
    if not a or not b:
        return False
    sm = SequenceMatcher(None, a, b, autojunk=False)
    return sm.real_quick_ratio() >= AGREE_RATIO and sm.quick_ratio() >= AGREE_RATIO and sm.ratio() >= AGREE_RATIO


# --- close: what the gate counts as the same next action ----------------------------------------------------------

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
