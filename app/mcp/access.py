"""The bearer token of the MCP server's HTTP transport: `<data dir>/runtime/mcp_token`, made once, this user's only.
Light on purpose (no SDK import), so `nightschool mcp token` answers at once."""
from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from app.core.base import paths
from app.core.base.files import atomic_write

TOKEN_FILE = "mcp_token"


def token_path() -> Path:
    return paths.data_dir() / "runtime" / TOKEN_FILE


def token() -> str:
    """The token, made on first use (0600). Two processes making it at once end up reading the same file."""
    path = token_path()
    if not _read(path):
        atomic_write(path, secrets.token_urlsafe(32), mode=0o600)
    elif path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)  # someone widened it: a token others can read is no token
    found = _read(path)
    if not found:
        raise RuntimeError(f"the MCP token file {path} is empty after writing it")  # a full disk, say
    return found


def matches(given: str | None) -> bool:
    """Whether `given` is the token (compared in constant time)."""
    return bool(given) and hmac.compare_digest(given.encode("utf-8"), token().encode("utf-8"))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return ""
