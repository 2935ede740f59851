"""Exactly one runtime per data dir: an flock on runtime.lock (the kernel drops it when the holder dies, so a stale
lock is taken over) and runtime.json naming the holder (pid + start time, its status channel and token)."""
from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from app.core.base import files, paths, procs
from app.core.base.errors import Explained

LOCK, INFO = "runtime.lock", "runtime.json"


class RuntimeBusy(Explained):
    """Another process runs this data dir's runtime."""

    def __init__(self, holder: dict) -> None:
        since = time.strftime("%Y-%m-%d %H:%M", time.localtime(holder.get("started") or 0))
        super().__init__(f"the night school already runs in {holder.get('role', 'another process')} "
                         f"(pid {holder.get('pid')}, since {since})",
                         why="one runtime per data dir schedules the work; a second would start jobs twice",
                         fix="attach to it (the window and `nightschool school status` do), or stop it first "
                             "(`nightschool daemon stop` / quit the window)")
        self.holder = holder


def runtime_dir() -> Path:
    path = paths.data_dir() / "runtime"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _flock(path: Path) -> int | None:
    """An open fd holding an exclusive flock on path (created 0600), or None when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def holder() -> dict | None:
    """The live runtime's runtime.json, or None when its process is gone (pid + start time: a reused pid is not it).
    Read without touching the flock, so looking never gets in the way of a runtime that is starting."""
    try:
        info = json.loads((runtime_dir() / INFO).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if procs.live_process(info.get("pid"), info.get("started")) is not None else None


@dataclass
class RuntimeLock:
    """Held for the runtime's life; release() (or the process's death) frees it."""

    fd: int
    info: dict

    @classmethod
    def acquire(cls, role: str, channel: str = "", token: str = "") -> RuntimeLock:
        fd = _flock(runtime_dir() / LOCK)
        if fd is None:
            found = holder() or {"pid": "unknown", "role": "another process"}
            raise RuntimeBusy(found)
        info = {"pid": os.getpid(), "started": procs.start_time(os.getpid()), "role": role, "channel": channel,
                "token": token}
        files.atomic_write(runtime_dir() / INFO, json.dumps(info), mode=0o600)
        return cls(fd, info)

    def update(self, **values) -> None:
        self.info.update(values)
        files.atomic_write(runtime_dir() / INFO, json.dumps(self.info), mode=0o600)

    def release(self) -> None:
        if self.fd < 0:
            return
        (runtime_dir() / INFO).unlink(missing_ok=True)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = -1


# --- one process per login session (the tray) ------------------------------------------------------------
TRAY = "tray"  # the tray process's SessionLock name


def session_key() -> str:
    """This login session and display, as a file name part: a tray icon belongs to one display of one session."""
    parts = (os.environ.get("XDG_SESSION_ID") or "", os.environ.get("WAYLAND_DISPLAY") or os.environ.get("DISPLAY")
             or "")
    return "-".join("".join(c if c.isalnum() else "_" for c in part) or "none" for part in parts)


@dataclass
class SessionLock:
    """One `name` process per login session for this data dir (e.g. the tray): an flock on
    runtime/<name>-<session>.lock the kernel drops when the holder dies; the file names the holder's pid."""

    fd: int
    path: Path

    @staticmethod
    def path_for(name: str) -> Path:
        return runtime_dir() / f"{name}-{session_key()}.lock"

    @classmethod
    def take(cls, name: str) -> SessionLock | None:
        """Held for the process's life; None when another process of this session holds it."""
        path = cls.path_for(name)
        fd = _flock(path)
        if fd is None:
            return None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        return cls(fd, path)

    @classmethod
    def held_by(cls, name: str) -> int | None:
        """The pid of the process holding `name` in this session (0 when it cannot be read), None when none does."""
        path = cls.path_for(name)
        if not path.exists():
            return None
        fd = _flock(path)
        if fd is not None:  # free: nobody holds it (let go at once)
            os.close(fd)
            return None
        try:
            return int(path.read_text(encoding="utf-8").strip() or 0)
        except (OSError, ValueError):
            return 0

    def release(self) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1
