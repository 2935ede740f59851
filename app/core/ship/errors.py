"""The refusal a shipping step raises: what happened, why, and the fix (an Explained)."""
from __future__ import annotations

from app.core.base.errors import Explained


class ShipError(Explained):
    """Shipping cannot go on (a template Ollama cannot take, a missing GGUF, a full disk); says why and the fix."""
