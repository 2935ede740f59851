"""Execution backends: where a job's engine runs — `local` (a subprocess here), `ray` (Ray Jobs), `skypilot`.

The engine and its protocol are the same everywhere (`python -m engine --spec FILE`); a backend only decides how it
is started, how its events come back into the run's events.jsonl and how its checkpoints come home.

What a remote job cannot do that a local one can (and why):
- pause/resume/stop/checkpoint-now are relayed through a control file on the checkpoint storage that the remote
  wrapper (backends/entry.py) forwards to the engine's Unix socket: they take effect within ~1 s but are not
  acknowledged synchronously (the socket is on the remote machine and no port of it is exposed).
- a remote job's checkpoints come home when its attempt ends (finalise), not as each one is sealed.
- `cancel` ends the remote job through the cluster (Ray: stop_job), not by signalling a local process group.
"""
from __future__ import annotations

import json
from pathlib import Path

from app.core.base.errors import Explained

NAMES = ("local", "ray", "skypilot")
SETTING = "train.backend"  # the default backend for new jobs (a job's own choice wins)
CHOICE_FILE = "backend.json"  # in the run dir: which backend this job runs on


class BackendError(Explained, ValueError):
    """A backend cannot be used as asked: what, why, what to do."""


def check_name(name: str) -> str:
    if name not in NAMES:
        raise BackendError(f"unknown execution backend {name!r}", why=f"the backends are {', '.join(NAMES)}",
                           fix="pass --on local, --on ray or --on skypilot")
    return name


def default_name(store) -> str:
    from app.core.base import settings

    return check_name(settings.get(store, SETTING, "local") or "local")


def record_choice(run_dir: Path, name: str) -> None:
    """Remember a job's backend in its run dir (the queue row shows it from there)."""
    if check_name(name) != "local":
        (Path(run_dir) / CHOICE_FILE).write_text(json.dumps({"backend": name}), encoding="utf-8")


def choice_of(run_dir: str | Path) -> str:
    path = Path(run_dir) / CHOICE_FILE
    if not path.is_file():
        return "local"
    return json.loads(path.read_text(encoding="utf-8")).get("backend", "local")


def remote_for(run_dir: str | Path, store):
    """The remote backend object that runs this job, or None for a local job."""
    name = choice_of(run_dir)
    if name == "ray":
        from app.core.train.backends.ray import RayBackend

        return RayBackend.from_settings(store)
    if name == "skypilot":
        from app.core.train.backends.skypilot import SkyPilotBackend

        return SkyPilotBackend.from_settings(store)
    return None
