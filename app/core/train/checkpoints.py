"""Checkpoint folders on disk: a completion marker with every file's size and sha256 (so a torn checkpoint is
detected and skipped), the newest good one to resume from, and retention that never deletes best, last or kept."""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from app.core.base.files import atomic_write
from app.core.base.fingerprint import sha256_file

MARKER = "nightschool-checkpoint.json"
KEEP = ".keep"  # a checkpoint holding this file (e.g. one that is deployed) is never deleted
HASH_LIMIT = 512 * 1024**2  # files larger than this are checked by size only
_NAME = re.compile(r"^checkpoint-(\d+)$")


@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    step: int
    eval_loss: float | None
    train_loss: float | None
    elapsed_s: float
    tokens: int
    reason: str


def step_of(path: Path) -> int | None:
    m = _NAME.match(Path(path).name)
    return int(m.group(1)) if m else None


def _files(folder: Path) -> dict[str, list]:
    out = {}
    for file in sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in (MARKER, KEEP)):
        size = file.stat().st_size
        out[file.relative_to(folder).as_posix()] = [size, sha256_file(file) if size <= HASH_LIMIT else None]
    return out


def write_marker(folder: Path, step: int, *, eval_loss: float | None = None, train_loss: float | None = None,
                 elapsed_s: float = 0.0, tokens: int = 0, reason: str = "scheduled") -> Path:
    """Seal a finished checkpoint: written last, atomically (temp + fsync + rename)."""
    folder = Path(folder)
    body = {"step": step, "eval_loss": eval_loss, "train_loss": train_loss, "elapsed_s": elapsed_s,
            "tokens": tokens, "reason": reason, "files": _files(folder)}
    return atomic_write(folder / MARKER, json.dumps(body, indent=1))


def verify(folder: Path) -> CheckpointInfo | None:
    """The checkpoint's info when it is complete and unchanged since it was sealed; None when torn."""
    folder = Path(folder)
    try:
        body = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        files = body["files"]
        for rel, (size, digest) in files.items():
            file = folder / rel
            if file.stat().st_size != size or (digest is not None and sha256_file(file) != digest):
                return None
        if not files:
            return None
        return CheckpointInfo(folder, int(body["step"]), body.get("eval_loss"), body.get("train_loss"),
                              float(body.get("elapsed_s") or 0.0), int(body.get("tokens") or 0),
                              body.get("reason", "scheduled"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def candidates(root: Path) -> list[Path]:
    """checkpoint-N folders under root, oldest step first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and step_of(p) is not None]
    return sorted(found, key=step_of)


def scan(root: Path) -> tuple[list[CheckpointInfo], list[Path]]:
    """(good checkpoints oldest first, torn folders)."""
    good, torn = [], []
    for folder in candidates(root):
        info = verify(folder)
        (good.append(info) if info else torn.append(folder))
    return good, torn


def latest_good(root: Path) -> CheckpointInfo | None:
    good, _ = scan(root)
    return good[-1] if good else None


def best(good: list[CheckpointInfo]) -> CheckpointInfo | None:
    scored = [c for c in good if c.eval_loss is not None]
    return min(scored, key=lambda c: (c.eval_loss, -c.step)) if scored else None


def protected(folder: Path) -> bool:
    return (Path(folder) / KEEP).exists()


def prune(root: Path, keep_last: int, extra_keep: set[Path] | None = None) -> list[Path]:
    """Delete old checkpoints beyond the newest `keep_last`, never best, last, protected ones or `extra_keep`;
    torn folders older than the newest good one are deleted too. Returns what was deleted."""
    good, torn = scan(root)
    keep = {c.path for c in good[-max(keep_last, 1):]}
    if (b := best(good)) is not None:
        keep.add(b.path)
    keep |= {Path(p) for p in (extra_keep or set())}
    newest = good[-1].step if good else None
    doomed = [c.path for c in good if c.path not in keep and not protected(c.path)]
    doomed += [t for t in torn if newest is not None and step_of(t) < newest and not protected(t)]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def set_aside_torn(root: Path) -> list[Path]:
    """Before resuming: torn folders newer than the last good checkpoint are removed so the trainer can write
    those steps again; returns them (the caller reports them)."""
    good, torn = scan(root)
    newest = good[-1].step if good else -1
    gone = [t for t in torn if step_of(t) > newest and not protected(t)]
    for path in gone:
        shutil.rmtree(path, ignore_errors=True)
    return gone
