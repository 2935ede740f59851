"""Which agent wrote a transcript file, told from its first records by the recognisers of capture/agents.py."""
from __future__ import annotations

from itertools import chain
from pathlib import Path

from app.core.base import lines
from app.core.capture import agents

SNIFF_RECORDS = 25  # records looked at
MAX_DOCUMENT_BYTES = 256 * 1024**2  # a single-document file larger than this is not loaded


def detect_format(path: str | Path) -> str | None:
    """The name of the agent whose transcript this is; None for anything else (a format we cannot read yet). The
    records are read one at a time, up to SNIFF_RECORDS: nearly every transcript says so on its first line."""
    records = lines.first_records(path, SNIFF_RECORDS)
    try:
        first = next(records, None)
        if first is lines.BAD:  # maybe one pretty-printed JSON document
            found = _document_format(Path(path))
            if found:
                return found
        for record in chain([first], records):
            found = agents.detected(record) if isinstance(record, dict) else None
            if found:
                return found
    except OSError:
        return None
    finally:
        records.close()
    return None


def _document_format(path: Path) -> str | None:
    """A whole-file JSON document (such as the older Gemini CLI session)."""
    if path.stat().st_size > MAX_DOCUMENT_BYTES:
        return None
    doc = lines.loads(path.read_bytes().decode("utf-8", errors="replace").lstrip("\ufeff"))
    return agents.detected_document(doc) if isinstance(doc, dict) else None
