"""Content fingerprints (sha256) of files and folders, shared by the engine and the result validator."""
from __future__ import annotations

import hashlib
from pathlib import Path

from app.core.base.paths import CODE_ROOT


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_dir(path: str | Path) -> str:
    """A fingerprint over every file's relative name and content, in sorted order."""
    root = Path(path)
    h = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(file.relative_to(root).as_posix().encode() + b"\0")
        h.update(sha256_file(file).encode())
    return h.hexdigest()


def code_hash() -> str:
    """The training code's fingerprint: every .py file under engine/ and app/core/ (name + content)."""
    root = CODE_ROOT
    h = hashlib.sha256()
    for pkg in ("engine", "app/core"):
        for file in sorted((root / pkg).rglob("*.py")):
            h.update(file.relative_to(root).as_posix().encode() + b"\0")
            h.update(sha256_file(file).encode())
    return h.hexdigest()
