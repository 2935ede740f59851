"""Which agent wrote a transcript file (Claude Code, Codex CLI, Gemini CLI), told from its first records."""
from __future__ import annotations

from pathlib import Path

from app.core.datafiles import lines

SNIFF_RECORDS = 25  # records looked at
MAX_DOCUMENT_BYTES = 256 * 1024**2  # a single-document file larger than this is not loaded

CLAUDE_TYPES = {"user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation",
                "attachment", "progress", "custom-title", "tag"}
CLAUDE_KEYS = ("uuid", "parentUuid", "leafUuid", "messageId", "sessionId")
CODEX_TYPES = {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
CODEX_BARE_ITEMS = {"message", "reasoning", "function_call", "function_call_output", "local_shell_call"}
GEMINI_TYPES = {"user", "gemini", "info", "error", "warning"}


def detect_format(path: str | Path) -> str | None:
    """Return "claude-code", "codex" or "gemini"; None for anything else (a format we cannot read yet)."""
    try:
        head = lines.head(path, SNIFF_RECORDS)
    except OSError:
        return None
    if head and head[0] is lines.BAD:  # maybe one pretty-printed JSON document
        found = _document_format(Path(path))
        if found:
            return found
    records = [r for r in head if isinstance(r, dict)]
    if records and _gemini_metadata(records[0]):
        return "gemini"
    for record in records:
        found = _record_format(record)
        if found:
            return found
    return None


def _record_format(rec: dict) -> str | None:
    kind = rec.get("type")
    if kind in CODEX_TYPES and "payload" in rec:
        return "codex"
    if kind in CODEX_BARE_ITEMS and "payload" not in rec and ("role" in rec or "call_id" in rec or "summary" in rec) \
            and "message" not in rec:
        return "codex"  # an older rollout: response items without the envelope
    if "$rewindTo" in rec or "$set" in rec:
        return "gemini"
    if kind in GEMINI_TYPES and isinstance(rec.get("id"), str) and "content" in rec \
            and "uuid" not in rec and "message" not in rec:
        return "gemini"
    if kind in CLAUDE_TYPES and (any(k in rec for k in CLAUDE_KEYS) or isinstance(rec.get("message"), dict)):
        return "claude-code"
    return None


def _gemini_metadata(rec: dict) -> bool:
    return isinstance(rec.get("sessionId"), str) and "projectHash" in rec and "type" not in rec


def _document_format(path: Path) -> str | None:
    """A whole-file JSON document: the older Gemini CLI session {sessionId, projectHash, messages}."""
    if path.stat().st_size > MAX_DOCUMENT_BYTES:
        return None
    doc = lines.loads(path.read_bytes().decode("utf-8", errors="replace").lstrip("\ufeff"))
    if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
        return None
    typed = [m for m in doc["messages"] if isinstance(m, dict) and m.get("type") in GEMINI_TYPES]
    if "sessionId" in doc and ("projectHash" in doc or typed):
        return "gemini"
    return None
