"""Why the engine environment could not be set up: one Explained (what, why, what to do) per cause."""
from __future__ import annotations

from app.core.base.errors import Explained


class EngineSetupError(Explained):
    """Setting up or probing the engine environment failed; the message says what to do."""


class SetupCancelled(EngineSetupError):
    """The user stopped the set-up; what was installed stays and the next run goes on from there."""
