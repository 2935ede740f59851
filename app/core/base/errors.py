"""The one shape of a refusal the user reads: what happened, why, what to do (each a sentence)."""
from __future__ import annotations

import re

_WORD = re.compile(r"[a-z]+(?=[\s,;:]|$)")  # a plain lower-case word, not a name like max_rows or a path
KEEP_CASE = {"nightschool", "pip", "stdin", "pid"}  # a why or fix may start with a command or a name: not a word


def sentence(text: str) -> str:
    """text as a sentence: its first word capitalised when it is a plain word (names and commands are kept)."""
    word = _WORD.match(text)
    return text[0].upper() + text[1:] if word and word.group() not in KEEP_CASE else text


class Explained(Exception):
    """An error with its reason and the fix; str() joins them as sentences (the why and the fix capitalised: the
    message is often read after a prefix, "error: …" or "Not queued — …")."""

    def __init__(self, message: str, why: str = "", fix: str = "") -> None:
        super().__init__(message)
        self.message, self.why, self.fix = message, why, fix

    def __str__(self) -> str:
        parts = [self.message] + [sentence(str(x)) for x in (self.why, self.fix) if x]
        return " ".join(x.rstrip(".") + "." for x in parts if x)
