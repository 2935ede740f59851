"""A dataset build that cannot go on: what, why, what to do (kept light: workers import it before any heavy work)."""
from __future__ import annotations

from app.core.base.errors import Explained


class BuildError(Explained):
    """What stopped the build, why, and what to do."""
