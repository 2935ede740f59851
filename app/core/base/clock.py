"""The one clock of stored times: aware UTC (`schema` hands it on; a capture worker reads it without the schema)."""
from __future__ import annotations

from datetime import datetime, timezone


def utcnow() -> datetime:
    return datetime.now(timezone.utc)
