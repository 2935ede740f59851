"""Engine errors that reach the user: what happened, why, and what to do."""
from __future__ import annotations

from app.core.base import protocol as P
from app.core.base.errors import Explained


class EngineError(Explained):
    """A failure with a message for people (the job's error shows it)."""

    def body(self) -> P.Error:
        return P.Error(message=self.message, why=self.why, fix=self.fix)
