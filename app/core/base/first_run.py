"""Whether the first-run wizard was finished or skipped (store key `first_run`), so it is shown once."""
from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel

from app.core.base import settings
from app.core.base.store import Store

KEY = "first_run"


class FirstRun(BaseModel):
    """The wizard's outcome: finished (done) or skipped, and when (ISO 8601, UTC)."""

    done: bool = False
    skipped: bool = False
    at: str | None = None


def load(store: Store) -> FirstRun:
    return settings.load_model(store, KEY, FirstRun)


def pending(store: Store) -> bool:
    """True until the wizard was finished or skipped."""
    state = load(store)
    return not (state.done or state.skipped)


def mark(store: Store, skipped: bool = False) -> FirstRun:
    """Record the wizard as finished (skipped=False) or skipped, now."""
    state = FirstRun(done=not skipped, skipped=skipped, at=datetime.now(UTC).isoformat(timespec="seconds"))
    settings.put(store, KEY, state.model_dump())
    return state
