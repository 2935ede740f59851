"""The teacher API's key: in the OS keyring, else a 0600 file in the config dir (never the data dir), or the env."""
from __future__ import annotations

import os
from pathlib import Path

import keyring
import keyring.backends.fail
import keyring.backends.null
from keyring.errors import KeyringError, PasswordDeleteError

from app.core.base.errors import Explained
from app.core.base.paths import config_dir, data_dir

SERVICE, USERNAME = "nightschool", "teacher"
ENV_KEY = "NIGHTSCHOOL_TEACHER_KEY"
FILE_NAME = "teacher.key"
UNUSABLE = (keyring.backends.fail.Keyring, keyring.backends.null.Keyring)


class TeacherKeyError(Explained, ValueError):
    """The key cannot be stored or read: what happened, why, what to do (the key itself is never in the text)."""


def key_file() -> Path:
    """Where the key is kept when no keyring is usable (refused when that would be under the data dir)."""
    path = config_dir() / FILE_NAME
    home = data_dir().resolve()
    if path.resolve().is_relative_to(home):
        raise TeacherKeyError(f"the key file would be {path}, inside the data dir {home}",
                              why="the data dir holds the database, logs and datasets, which the key must stay out of",
                              fix="set NIGHTSCHOOL_CONFIG to a folder outside the data dir")
    return path


def keyring_usable() -> bool:
    """Whether an OS keyring backend is there (headless Linux often has only keyring's fail or null backend)."""
    try:
        backend = keyring.get_keyring()
        return not isinstance(backend, UNUSABLE) and backend.priority > 0
    except Exception:  # noqa: BLE001 - a broken backend (or its configuration) counts as none
        return False


def set_key(key: str) -> str:
    """Keep the key; returns where it went: "keyring" or "file:<path>" (mode 0600)."""
    key = (key or "").strip()
    if not key:
        raise TeacherKeyError("the teacher's API key is empty", fix="pass the key the teacher's API gave you")
    if keyring_usable():
        try:
            keyring.set_password(SERVICE, USERNAME, key)
        except KeyringError:
            pass  # a locked or refusing keyring: the file below
        else:
            _remove_file()
            return "keyring"
    return f"file:{_write_file(key)}"


def get_key() -> str | None:
    """The key: $NIGHTSCHOOL_TEACHER_KEY, else the keyring, else the key file; None when there is none."""
    env = os.environ.get(ENV_KEY, "").strip()
    if env:
        return env
    stored = _from_keyring()
    if stored:
        return stored
    path = key_file()
    if not path.is_file():
        return None
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)  # someone loosened it: only the owner may read the key
    return path.read_text(encoding="utf-8").strip() or None


def clear_key() -> None:
    """Forget the stored key (the keyring entry and the file; $NIGHTSCHOOL_TEACHER_KEY is the user's to unset)."""
    if keyring_usable():
        try:
            keyring.delete_password(SERVICE, USERNAME)
        except (PasswordDeleteError, KeyringError):
            pass
    _remove_file()


def where() -> str:
    """Where the key comes from: "env:NIGHTSCHOOL_TEACHER_KEY", "keyring", "file:<path>" or "none"."""
    if os.environ.get(ENV_KEY, "").strip():
        return f"env:{ENV_KEY}"
    if _from_keyring():
        return "keyring"
    path = key_file()
    return f"file:{path}" if path.is_file() else "none"


def _from_keyring() -> str | None:
    if not keyring_usable():
        return None
    try:
        return keyring.get_password(SERVICE, USERNAME) or None
    except KeyringError:
        return None


def _write_file(key: str) -> Path:
    path = key_file()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(key + "\n")
    path.chmod(0o600)  # an older file keeps its mode through O_CREAT
    return path


def _remove_file() -> None:
    try:
        key_file().unlink(missing_ok=True)
    except TeacherKeyError:
        pass
