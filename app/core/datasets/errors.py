"""A dataset build that cannot go on: what, why, what to do (kept light: workers import it before any heavy work)."""
from __future__ import annotations


class BuildError(Exception):
    def __init__(self, message: str, why: str = "", fix: str = "") -> None:
        super().__init__(message)
        self.message, self.why, self.fix = message, why, fix
