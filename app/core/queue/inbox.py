"""The inbox folder: stable *.jsonl files dropped there are detected, validated, queued and moved (never deleted)."""
from __future__ import annotations

import json
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from app.core.base import paths
from app.core.base.store import Store
from app.core.train.spec import DEFAULT_MODEL, RECIPES, Hyper

PRIORITY_DIRS = ("high", "normal", "low")  # files directly in inbox/ are normal
ACCEPTED, REFUSED, TAKING = "accepted", "refused", ".taking"
STABLE_S = 2.0  # a file is taken once it is unchanged across two scans and untouched for this long
SIDECAR_KEYS = {"kind", "model", "priority", "max_steps", "dry_run", "hyper"}
DEFAULTS_KEY = "inbox.defaults"  # setting: sidecar-shaped defaults for every inbox job (e.g. the model)


@dataclass
class Outcome:
    """What became of one dropped file."""

    name: str
    moved_to: Path
    job_id: str | None = None  # queued as this job
    reason: str | None = None  # refused: why (also in <moved_to>.reason.txt)


@dataclass
class Submit:
    """How the inbox hands files to the queue (the queue's own methods: the inbox never imports the Queue)."""

    add: Callable[..., Any]  # add(file, source=..., **options) -> the queued job (with .id)
    move_data: Callable[[str, str], None]  # (job id, path): the job's dataset file now lives there
    defaults: Callable[[], dict]  # the DEFAULTS_KEY setting
    store: Store  # to find the job of a file a crashed scan left half-taken


class Inbox:
    """Scans <data dir>/inbox/ for the queue; keeps what it saw last time to tell a finished copy."""

    def __init__(self, submit: Submit, root: Path | None = None) -> None:
        self.submit = submit
        self.root = Path(root) if root else paths.inbox_dir()
        self._seen: dict[Path, tuple] = {}
        self._lock = threading.Lock()

    def ensure(self) -> Path:
        for name in (*PRIORITY_DIRS, ACCEPTED, REFUSED, *(f"{TAKING}/{p}" for p in PRIORITY_DIRS)):
            (self.root / name).mkdir(parents=True, exist_ok=True)
        return self.root

    def scan(self) -> list[Outcome]:
        """Take every stable file: queue it (moved to accepted/) or refuse it (moved to refused/ with why)."""
        with self._lock:
            self.ensure()
            self._recover()
            ready = self._stable(self._candidates())
            return [self._take(path, priority) for path, priority in ready]

    def _candidates(self) -> list[tuple[Path, str]]:
        found = [(p, "normal") for p in self.root.iterdir()]
        for priority in PRIORITY_DIRS:
            found += [(p, priority) for p in (self.root / priority).iterdir()]
        return [(p, prio) for p, prio in found if _droppable(p)]

    def _stable(self, found: list[tuple[Path, str]]) -> list[tuple[Path, str]]:
        """Files unchanged since the last scan (with their sidecar) and untouched for STABLE_S, oldest first."""
        now, seen, ready = time.time(), {}, []
        for path, priority in found:
            sig = _signature(path)
            if sig is None:
                continue
            seen[path] = sig
            if self._seen.get(path) == sig and now - sig[1] / 1e9 >= STABLE_S and now - sig[3] / 1e9 >= STABLE_S:
                ready.append((sig[1], path.name, path, priority))
        self._seen = seen
        return [(path, priority) for _, _, path, priority in sorted(ready)]

    def _take(self, path: Path, priority: str) -> Outcome:
        """Move the file to .taking/ first, so a crash between queueing and moving never queues it twice."""
        from app.core.datafiles.chatfile import DatasetError
        from app.core.train.modelref import ModelRefError

        self._seen.pop(path, None)
        work = _move(path, self.root / TAKING / priority / path.name)
        try:
            job = self.submit.add(work, source="inbox", **self._options(work, priority))
        except paths.SetupError:
            _move(work, path)  # the installation cannot run jobs: leave the file for later
            raise
        except (DatasetError, ModelRefError, ValueError, OSError) as exc:
            return self._refuse(work, str(exc))
        except Exception as exc:  # noqa: BLE001 - a bad file must never stop the scheduler; the reason is kept
            return self._refuse(work, f"{path.name} could not be queued: {type(exc).__name__}: {exc}")
        return self._accept(work, job.id)

    def _accept(self, work: Path, job_id: str) -> Outcome:
        dest = _move(work, self.root / ACCEPTED / f"{job_id}-{work.name}")
        self.submit.move_data(job_id, str(dest))
        return Outcome(work.name, dest, job_id=job_id)

    def _recover(self) -> None:
        """Files a crashed scan left in .taking/: accepted if their job exists, else back in the inbox."""
        from sqlalchemy import select

        from app.core.base.schema import Job

        for priority in PRIORITY_DIRS:
            for work in sorted((self.root / TAKING / priority).glob("*.jsonl")):
                with self.submit.store.session() as s:
                    job_id = s.scalar(select(Job.id).where(Job.dataset_path == str(work.resolve())))
                if job_id:
                    self._accept(work, job_id)
                else:
                    _move(work, self.root / priority / work.name)

    def _refuse(self, path: Path, reason: str) -> Outcome:
        dest = _move(path, self.root / REFUSED / path.name)
        dest.with_name(dest.name + ".reason.txt").write_text(reason + "\n", encoding="utf-8")
        return Outcome(path.name, dest, reason=reason)

    def _options(self, path: Path, folder_priority: str) -> dict:
        """queue.add arguments: the settings' defaults, then the sidecar <name>.json, over what the file shows."""
        if path.suffix != ".jsonl":
            raise ValueError(f"{path.name} is not a .jsonl file: the inbox takes JSON Lines training files "
                             "(chat `messages`, or `prompt`/`chosen`/`rejected` pairs)")
        opts = {"kind": detect_kind(path), "priority": folder_priority, "model": DEFAULT_MODEL}
        opts.update(_checked(self.submit.defaults() or {}, f"the {DEFAULTS_KEY} setting"))
        opts.update(read_sidecar(path))
        hyper = dict(opts.pop("hyper", None) or {})
        if "max_steps" in opts:
            hyper["max_steps"] = opts.pop("max_steps")
        opts["hyper"] = Hyper(**hyper) if hyper else None
        return opts


def detect_kind(path: Path) -> str:
    """sft for chat `messages`, dpo for `prompt`/`chosen`/`rejected` pairs (judged by the first record);
    anything else is checked as chat, which refuses it with a precise message."""
    try:
        with path.open("rb") as fh:
            for raw in fh:
                if raw.strip():
                    rec = json.loads(raw)
                    break
            else:
                return "sft"
    except (OSError, ValueError):
        return "sft"
    if isinstance(rec, dict) and "messages" not in rec and {"prompt", "chosen", "rejected"} <= rec.keys():
        return "dpo"
    return "sft"


def read_sidecar(path: Path) -> dict:
    """The optional <name>.json next to a dropped file: kind, model, priority, max_steps, dry_run, hyper."""
    side = sidecar_of(path)
    if not side.is_file():
        return {}
    try:
        data = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{side.name} (the settings for {path.name}) is not valid JSON: {exc}") from None
    return _checked(data, side.name)


def _checked(data, what: str) -> dict:
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a JSON object")
    unknown = sorted(set(data) - SIDECAR_KEYS)
    if unknown:
        raise ValueError(f"{what} has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(SIDECAR_KEYS))}")
    if "kind" in data and data["kind"] not in RECIPES:
        raise ValueError(f"{what}: unknown recipe {data['kind']!r}; choose one of {', '.join(RECIPES)}")
    return dict(data)


def sidecar_of(path: Path) -> Path:
    return path.with_suffix(".json")


def _droppable(path: Path) -> bool:
    """A file to take: not hidden, not a partial download, not a sidecar (it travels with its .jsonl)."""
    name = path.name
    if not path.is_file() or name.startswith(".") or name.endswith((".part", ".tmp", ".crdownload", ".partial")):
        return False
    return path.suffix != ".json"  # a sidecar waiting for its data file (or a stray one) is left alone


def _signature(path: Path) -> tuple | None:
    """(size, mtime_ns) of the file and of its sidecar (0, 0 when none); None if it vanished."""
    try:
        st = path.stat()
    except OSError:
        return None
    side = sidecar_of(path) if path.suffix == ".jsonl" else None
    try:
        sst = side.stat() if side is not None else None
    except OSError:
        sst = None
    return (st.st_size, st.st_mtime_ns, sst.st_size if sst else 0, sst.st_mtime_ns if sst else 0)


def _move(path: Path, dest: Path) -> Path:
    """Move a file (and its sidecar) to dest, or dest with -2, -3 … when that name is taken."""
    dest = _free(dest)
    side = sidecar_of(path)
    shutil.move(str(path), str(dest))
    if path.suffix == ".jsonl" and side.is_file():
        shutil.move(str(side), str(_free(sidecar_of(dest))))
    return dest


def _free(dest: Path) -> Path:
    n, candidate = 2, dest
    while candidate.exists() or candidate.with_name(candidate.name + ".reason.txt").exists():
        candidate = dest.with_name(f"{dest.stem}-{n}{dest.suffix}")
        n += 1
    return candidate
