"""Writes that must not tear: temp file beside the target, fsync, rename over it, fsync the folder."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def fsync_dir(folder: str | Path) -> None:
    """Make a rename in `folder` durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def replace(tmp: str | Path, target: str | Path) -> Path:
    """Rename a finished temp file or folder over `target`, durably."""
    target = Path(target)
    os.replace(tmp, target)
    fsync_dir(target.parent)
    return target


def atomic_write(path: str | Path, data: str | bytes, mode: int | None = None, keep_mode: bool = False) -> Path:
    """Write `data` to `path` so a reader sees the old or the new file, never a torn one, even after a power cut.
    `mode`: the new file's permissions (e.g. 0o600); `keep_mode`: keep those of the file it replaces."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        if keep_mode and path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        elif mode is not None:
            os.chmod(tmp, mode)
        else:
            os.chmod(tmp, 0o666 & ~_UMASK)
        return replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once, at import: os.umask cannot be read without setting it
