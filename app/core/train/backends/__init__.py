"""Execution backends: where a job's engine runs — `local` (a subprocess here), `ray` (Ray Jobs), `skypilot`.

The engine and its protocol are the same everywhere (`python -m engine --spec FILE`); a backend only decides how it
is started, how its events come back into the run's events.jsonl and how its checkpoints come home. `local` is the
JobManager's own subprocess (jobs.py); a remote backend (ray.py, skypilot.py) is a `base.Backend` (start, alive,
status, finish, command, cancel). A new one is a module with its class and one line in `BACKENDS`: the CLI's `--on`,
the policy's `train_on` and `train.backend` take their names from there; JobManager.remote(run_dir) finds a job's one.

What a remote job cannot do that a local one can (and why):
- pause/resume/stop/checkpoint-now are relayed through a control file on the checkpoint storage that the remote
  wrapper (engine/train/remote_entry.py) forwards to the engine's Unix socket: they take effect within ~1 s but are not
  acknowledged synchronously (the socket is on the remote machine and no port of it is exposed).
- a remote job's checkpoints come home when its attempt ends (finalise), not as each one is sealed.
- `cancel` ends the remote job through the cluster (Ray: stop_job), not by signalling a local process group.
"""
from __future__ import annotations

import json
from pathlib import Path

from app.core.base import refs
from app.core.train.backends.base import Backend, BackendError

# The one place a backend is added: its name (`--on NAME`, the policy's `train_on`, the `train.backend` setting) ->
# ("module:Class" of its `base.Backend`, or None: the JobManager's own subprocess; what it is, in the CLI's words).
BACKENDS: dict[str, tuple[str | None, str]] = {
    "local": (None, "here"),
    "ray": ("app.core.train.backends.ray:RayBackend", "a Ray cluster: train.ray.address"),
    "skypilot": ("app.core.train.backends.skypilot:SkyPilotBackend", "a SkyPilot managed job"),
}
SETTING = "train.backend"  # the default backend for new jobs (a job's own choice wins)
CHOICE_FILE = "backend.json"  # in the run dir: which backend this job runs on


def names() -> tuple[str, ...]:
    """The backends' names, registry order (read each call: a test may plant one)."""
    return tuple(BACKENDS)


def _either(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def described() -> str:
    """The backends in words: "local (here), ray (a Ray cluster: train.ray.address) or skypilot (…)"."""
    return _either([f"{name} ({words})" for name, (_, words) in BACKENDS.items()])


def backend_class(name: str) -> type[Backend] | None:
    """The class of a remote backend (its module imported only now), or None for `local` and an unknown name."""
    entry = BACKENDS.get(name, (None, ""))[0]
    if entry is None:
        return None
    return refs.load(entry)


def check_name(name: str) -> str:
    if name not in BACKENDS:
        raise BackendError(f"unknown execution backend {name!r}", why=f"the backends are {', '.join(BACKENDS)}",
                           fix=f"pass {_either([f'--on {n}' for n in BACKENDS])}")
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


def remote_for(run_dir: str | Path, store) -> Backend | None:
    """The remote backend object that runs this job, or None for a local job."""
    cls = backend_class(choice_of(run_dir))
    return None if cls is None else cls.from_settings(store)


# `nightschool queue remote KEY VALUE`: the words a user types -> (setting key, type). Secrets are not settings: the
# Ray token goes to the OS keyring (`nightschool queue remote ray.token -` reads it from stdin).
SETTINGS = {
    "backend": (SETTING, str),
    "ray.address": ("train.ray.address", str), "ray.storage": ("train.ray.storage", str),
    "ray.remote_storage": ("train.ray.remote_storage", str), "ray.num_gpus": ("train.ray.num_gpus", float),
    "ray.unreachable_grace_s": ("train.ray.unreachable_grace_s", float),
    "skypilot.bucket": ("train.skypilot.bucket", str), "skypilot.storage_home": ("train.skypilot.storage_home", str),
    "skypilot.accelerators": ("train.skypilot.accelerators", str), "skypilot.infra": ("train.skypilot.infra", str),
    "skypilot.use_spot": ("train.skypilot.use_spot", lambda v: str(v).lower() in ("1", "true", "yes", "on")),
}


def set_setting(store, word: str, raw: str):
    """Set one remote-training setting by its word; returns the value kept."""
    from app.core.base import settings

    if word not in SETTINGS:
        raise BackendError(f"unknown remote-training setting {word!r}", why=f"the settings are {', '.join(SETTINGS)}",
                           fix="nightschool queue remote (no arguments) shows them with their values")
    key, kind = SETTINGS[word]
    try:
        value = kind(raw)
    except ValueError as exc:
        raise BackendError(f"{word} cannot be {raw!r}", why=str(exc), fix="give a number") from exc
    if word == "backend":
        check_name(value)
    settings.put(store, key, value)
    return value


def show_settings(store) -> dict[str, object]:
    """Each setting's value; ray.address unset but $RAY_ADDRESS set shows that, marked as the environment's."""
    import os

    from app.core.base import settings
    from app.core.train.backends.ray import ADDRESS_ENV

    shown = {word: settings.get(store, key, None) for word, (key, _) in SETTINGS.items()}
    if not shown["ray.address"] and os.environ.get(ADDRESS_ENV):
        shown["ray.address"] = f"{os.environ[ADDRESS_ENV]} (from ${ADDRESS_ENV}; a setting would win)"
    return shown


def set_ray_token(token: str) -> str:
    """Keep the Ray cluster's bearer token in the OS keyring (never in the database); returns where it went."""
    import keyring
    from keyring.errors import KeyringError

    from app.core.experience.keys import keyring_usable

    if not keyring_usable():
        raise BackendError("no OS keyring to keep the Ray token in", why="tokens are never stored in the database",
                           fix="export NIGHTSCHOOL_RAY_TOKEN=… in the environment that runs Nightschool instead")
    try:
        keyring.set_password("nightschool", "ray", token.strip())
    except KeyringError as exc:
        raise BackendError("the OS keyring refused the Ray token", why=str(exc),
                           fix="unlock the keyring, or export NIGHTSCHOOL_RAY_TOKEN=…") from exc
    return "keyring"
