"""The experience package's refusal: which entry or correction, what was wrong, what to send or do instead."""
from __future__ import annotations

from app.core.base.errors import Explained


class ExperienceError(Explained, ValueError):
    """A feedback call, a correction or a lookup that cannot be done (nothing was changed)."""


def no_experience(exp_id: str) -> ExperienceError:
    return ExperienceError(f"there is no experience {exp_id!r}", why="it was never recorded, or retention deleted it",
                           fix="use an id from `nightschool experience list` or the X-Nightschool-Experience header "
                               "of the answer")
