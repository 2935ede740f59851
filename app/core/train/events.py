"""Reading a run's events.jsonl (the engine appends one envelope per line; the last line may be half-written)."""
from __future__ import annotations

from pathlib import Path

from app.core.base import protocol as P


def read_events(path: str | Path, since_seq: int = 0) -> list[P.Envelope]:
    """Every complete event with seq > since_seq; a torn last line or an unknown line is skipped."""
    path = Path(path)
    if not path.is_file():
        return []
    out: list[P.Envelope] = []
    with path.open("rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                break  # being written right now
            try:
                env = P.loads(raw)
            except P.ProtocolError:
                continue
            if (env.seq or 0) > since_seq:
                out.append(env)
    return out


def last_of(events: list[P.Envelope], type_: str) -> P.Envelope | None:
    return next((e for e in reversed(events) if e.type == type_), None)
