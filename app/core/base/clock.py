"""The one clock of stored times: aware UTC (`schema` hands it on; a capture worker reads it without the schema)."""
from __future__ import annotations

from datetime import datetime, timezone


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def as_utc(moment: datetime) -> datetime:
    """A stored time as utcnow() makes it (SQLite gives it back naive, in UTC)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
