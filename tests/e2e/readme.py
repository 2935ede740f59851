"""README.md's commands as a reader sees them: every command line in its code blocks, comments and prompts cut."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
# the words a command line in the README starts with (anything else in a code block is output, JSON or a comment)
PROGRAMS = ("nightschool", ".venv/bin/nightschool", "bash", "sudo", "./install.sh", "./uninstall.sh", "pip", "ray",
            "sky", "export", "printf", "claude", "curl", "python", ".venv/bin/python")
_COMMENT = re.compile(r"(^|\s)#(\s.*)?$")  # '#12' (a checkpoint) is not a comment; ' # …' and a lone ' #' are


@dataclass(frozen=True)
class Command:
    """One command line of the README: its text as written (one space between words, no comment) and its line."""

    text: str
    line: int


def _code_lines(markdown: str):
    """(line number, text) of each line inside a fenced block or an indented (4+ spaces) block."""
    fenced = False
    for number, raw in enumerate(markdown.splitlines(), start=1):
        if raw.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or raw.startswith("    "):
            yield number, raw


def _starts_command(text: str) -> bool:
    first = text.split(maxsplit=1)[0] if text.split() else ""
    return first in PROGRAMS


def commands(path: Path = README) -> list[Command]:
    """Every command line; a synopsis's continuation lines (`[--model …]`, `| run …`) join the command above."""
    found: list[Command] = []
    for number, raw in _code_lines(path.read_text(encoding="utf-8")):
        text = " ".join(_COMMENT.sub("", raw).split())
        if not text:
            continue
        if _starts_command(text):
            found.append(Command(text, number))
        elif found and found[-1].line == number - 1 and text[0] in "[|":
            found[-1] = Command(f"{found[-1].text} {text}", number)
    return found
