"""The one shape of a refusal the user reads: what happened, why, what to do (each a sentence)."""
from __future__ import annotations


class Explained(Exception):
    """An error with its reason and the fix; str() joins them as sentences."""

    def __init__(self, message: str, why: str = "", fix: str = "") -> None:
        super().__init__(message)
        self.message, self.why, self.fix = message, why, fix

    def __str__(self) -> str:
        return " ".join(x.rstrip(".") + "." for x in (self.message, self.why, self.fix) if x)
