"""What `connect` writes and how `disconnect` undoes it: planned edits (shown before anything is written), a backup of
each existing file beside it first, a manifest per agent in <data dir>/connect/, and the exact restore (the same
bytes and permissions; a file connect created is deleted, with the folders it made)."""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from app.core.base import paths
from app.core.base.files import atomic_write
from app.core.ship.errors import ShipError

BACKUP_SUFFIX = ".nightschool-backup"
EDITED_SUFFIX = ".nightschool-edited"  # a file changed after connect, kept aside by `disconnect --force`
SECRET_MODE = 0o600


@dataclass
class Edit:
    """One file connect writes: its new bytes, the entry added there as shown (never the key), whether it holds the
    key (written readable by this user only)."""

    path: Path
    after: bytes
    added: str
    what: str
    secret: bool = False

    def payload(self, backup: Path | None) -> dict:
        return {"path": str(self.path), "action": "modify" if self.path.exists() else "create", "what": self.what,
                "added": self.added, "backup": str(backup) if backup else None, "holds_key": self.secret}


def read_text(path: Path) -> str:
    """A config file's text ('' when there is none); an unreadable one is a refusal that changes nothing."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ShipError(f"{path} cannot be read", why=str(exc), fix="fix its permissions or encoding; nothing was "
                        "written") from exc


def unmergeable(path: Path, why: str, block: str) -> ShipError:
    """The refusal for a file connect cannot merge into without losing something: nothing is written."""
    return ShipError(f"{path} cannot be merged safely, so nothing was written", why=why,
                     fix=f"add this to it by hand:\n{block}")


def _folder(create: bool = False) -> Path:
    """<data dir>/connect/, made only when a manifest is written (reading status never creates it)."""
    folder = paths.data_dir() / "connect"
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def manifest(agent: str) -> dict | None:
    """What connect wrote for `agent` (None: not connected)."""
    try:
        return json.loads((_folder() / f"{agent}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def sha256_of(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _free_backup_name(path: Path) -> Path:
    candidate, n = path.with_name(path.name + BACKUP_SUFFIX), 1
    while candidate.exists():
        candidate, n = path.with_name(f"{path.name}{BACKUP_SUFFIX}.{n}"), n + 1
    return candidate


def backup_for(agent: str, path: Path) -> Path | None:
    """Where the original of `path` is (or will be) kept: the first connect's backup, else a free name beside it;
    None when there is no original (connect creates the file)."""
    for entry in (manifest(agent) or {}).get("files", []):
        if entry["path"] == str(path):
            return Path(entry["backup"]) if entry["existed"] else None
    return _free_backup_name(path) if path.exists() else None


def _missing_parents(path: Path) -> list[str]:
    made, folder = [], path.parent
    while not folder.exists():
        made.append(str(folder))
        folder = folder.parent
    return made  # deepest first


def _record(path: Path) -> dict:
    """The original of a file about to be written: a backup copy (bytes and permissions), or that there was none."""
    if not path.exists():
        return {"path": str(path), "existed": False, "made_dirs": _missing_parents(path)}
    backup = _free_backup_name(path)
    shutil.copy2(path, backup)
    return {"path": str(path), "existed": True, "backup": str(backup), "mode": path.stat().st_mode & 0o7777,
            "backup_sha256": sha256_of(backup)}


def apply(agent: str, edits: list[Edit]) -> dict:
    """Back up each existing file (once: connecting again keeps the first backup, so disconnect still restores what
    was there before nightschool), record it all, then write each file atomically."""
    record = manifest(agent) or {"agent": agent, "files": []}
    known = {entry["path"]: entry for entry in record["files"]}
    for edit in edits:
        entry = known.get(str(edit.path))
        if entry is None:
            entry = known[str(edit.path)] = _record(edit.path)
            record["files"].append(entry)
        entry["sha256"] = hashlib.sha256(edit.after).hexdigest()
    record["connected_at"] = time.time()
    atomic_write(_folder(create=True) / f"{agent}.json", json.dumps(record, indent=1), mode=SECRET_MODE)
    for edit in edits:
        keep = edit.path.exists() and not edit.secret
        atomic_write(edit.path, edit.after, mode=SECRET_MODE if edit.secret else None, keep_mode=keep)
    return record


def changed_since(record: dict) -> list[str]:
    """The files someone changed after connect wrote them."""
    return [e["path"] for e in record["files"] if sha256_of(Path(e["path"])) != e.get("sha256")]


def restore(agent: str, title: str, force: bool = False) -> list[dict]:
    """Put every file back exactly as it was before connect (a created one deleted); a file changed since is kept
    aside as <name>.nightschool-edited with `force`, else a refusal that restores nothing."""
    record = manifest(agent)
    if record is None:
        raise ShipError(f"{title} is not connected", why="nightschool has no record of writing its config",
                        fix=f"nightschool connect {agent}")
    for entry in record["files"]:
        if entry["existed"] and sha256_of(Path(entry["backup"])) != entry["backup_sha256"]:
            raise ShipError(f"the backup {entry['backup']} is missing or changed, so nothing was restored",
                            why=f"it holds {entry['path']} as it was before nightschool connect {agent}",
                            fix=f"restore {entry['path']} by hand; then delete {_folder() / (agent + '.json')}")
    changed = changed_since(record)
    if changed and not force:
        raise ShipError(f"{', '.join(changed)} changed after nightschool connect {agent} wrote it, so nothing was "
                        "restored", why="restoring the original would drop those later edits",
                        fix=f"nightschool disconnect {agent} --force keeps each changed file beside it as "
                            f"<name>{EDITED_SUFFIX} and restores the original")
    done = []
    for entry in reversed(record["files"]):
        path = Path(entry["path"])
        if entry["path"] in changed and path.exists():
            shutil.copy2(path, path.with_name(path.name + EDITED_SUFFIX))
        if entry["existed"]:
            atomic_write(path, Path(entry["backup"]).read_bytes(), mode=entry["mode"])
            Path(entry["backup"]).unlink()
            done.append({"path": entry["path"], "action": "restored", "from": entry["backup"]})
        else:
            path.unlink(missing_ok=True)
            for folder in entry.get("made_dirs", []):
                try:
                    Path(folder).rmdir()
                except OSError:
                    break  # not empty: something else lives there now
            done.append({"path": entry["path"], "action": "deleted"})
    (_folder() / f"{agent}.json").unlink()
    return done[::-1]
