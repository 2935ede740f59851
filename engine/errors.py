"""Engine errors that reach the user: what happened, why, and what to do."""
from __future__ import annotations

from app.core import protocol as P


class EngineError(Exception):
    """A failure with a message for people (the job's error shows it)."""

    def __init__(self, message: str, why: str = "", fix: str = "") -> None:
        super().__init__(message)
        self.message, self.why, self.fix = message, why, fix

    def body(self) -> P.Error:
        return P.Error(message=self.message, why=self.why, fix=self.fix)
