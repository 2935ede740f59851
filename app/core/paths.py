"""Where Nightschool keeps things: the data dir (platformdirs, or NIGHTSCHOOL_HOME) and its sub-folders."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import platformdirs

APP_NAME = "nightschool"
# Unix socket paths are limited to ~107 bytes; longer run dirs get a short socket dir instead.
MAX_SOCKET_PATH = 100


def data_dir() -> Path:
    """The data dir: $NIGHTSCHOOL_HOME if set, else the platform's user data dir."""
    env = os.environ.get("NIGHTSCHOOL_HOME")
    path = Path(env).expanduser() if env else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _sub(name: str) -> Path:
    path = data_dir() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def db_path() -> Path:
    return data_dir() / "nightschool.db"


def runs_dir() -> Path:
    return _sub("runs")


def models_dir() -> Path:
    return _sub("models")


def wheels_dir() -> Path:
    return _sub("wheels")


def socket_path(run_dir: Path, job_id: str) -> Path:
    """A Unix socket path for a job: in its run dir when short enough, else in a private temp dir."""
    candidate = run_dir / "engine.sock"
    if len(str(candidate)) <= MAX_SOCKET_PATH:
        return candidate
    short = Path(tempfile.gettempdir()) / f"nightschool-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    return short / f"{job_id}.sock"


class SetupError(RuntimeError):
    """The installation cannot run jobs (e.g. no engine interpreter); the message says what to do."""


def engine_python() -> str:
    """The interpreter that runs the engine: $NIGHTSCHOOL_ENGINE_PYTHON, else this one (not when frozen)."""
    env = os.environ.get("NIGHTSCHOOL_ENGINE_PYTHON")
    if env:
        return env
    if getattr(sys, "frozen", False):
        raise SetupError(
            "This is the packaged app: the training engine runs from a Python that has Nightschool's engine "
            "installed. Set NIGHTSCHOOL_ENGINE_PYTHON to that interpreter (see README, 'Packaged app')."
        )
    return sys.executable


def accelerate_args(processes: int) -> list[str]:
    """`accelerate launch` options for a multi-process job (the multi-GPU helper refines this: FSDP/DeepSpeed
    config files when GPUs are present, CPU processes otherwise)."""
    return ["--num_processes", str(processes), "--num_machines", "1", "--mixed_precision", "no", "--cpu"]
