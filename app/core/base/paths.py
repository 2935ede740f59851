"""Where Nightschool keeps things: the data dir (platformdirs, or NIGHTSCHOOL_HOME) and its sub-folders."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import platformdirs

from app.core.base.errors import Explained

APP_NAME = "nightschool"
CODE_ROOT = Path(__file__).resolve().parents[3]  # the checkout (or bundle) holding app/, engine/, resources/
# Unix socket paths are limited to ~107 bytes; longer run dirs get a short socket dir instead.
MAX_SOCKET_PATH = 100


def data_dir(create: bool = True) -> Path:
    """The data dir: $NIGHTSCHOOL_HOME if set, else the platform's user data dir (made unless `create` is False: a
    reader of one file there need not make it)."""
    env = os.environ.get("NIGHTSCHOOL_HOME")
    path = Path(env).expanduser() if env else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def config_dir() -> Path:
    """Where secrets that must stay out of the data dir live (the teacher's key file): $NIGHTSCHOOL_CONFIG if set,
    else the platform's user config dir. Never under the data dir, which is backed up and shared in bug reports."""
    env = os.environ.get("NIGHTSCHOOL_CONFIG")
    path = Path(env).expanduser() if env else Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))
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


def work_dir() -> Path:
    """Worker processes' scratch folders (an evaluation, an export): each is removed when its worker ends; what it
    made is moved to its own home first (evals/, exports/). Dataset builds work beside the datasets instead."""
    return _sub("work")


def gguf_cache_dir() -> Path:
    """f16 GGUFs of the models judged through llama.cpp, kept for the next evaluation and the export of the same model
    (engine/workers/gguf_cache.py keeps the newest few)."""
    return _sub("gguf-cache")


def inbox_dir() -> Path:
    """Dropped training files are queued from here (high/, normal/, low/ set the priority)."""
    return _sub("inbox")


def socket_path(run_dir: Path, job_id: str) -> Path:
    """A Unix socket path for a job: in its run dir when short enough, else in a private temp dir."""
    candidate = run_dir / "engine.sock"
    if len(str(candidate)) <= MAX_SOCKET_PATH:
        return candidate
    short = Path(tempfile.gettempdir()) / f"nightschool-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    return short / f"{job_id}.sock"


class SetupError(Explained, RuntimeError):
    """The installation cannot run jobs (e.g. no engine interpreter); the message says what to do."""


ENGINE_READY = "ready.json"  # written in the engine environment once its import probe passed


def engine_env_dir() -> Path:
    """The engine environment the packaged app sets up for itself (a venv): <data dir>/engine-env."""
    return data_dir() / "engine-env"


def engine_env_python(env_dir: Path | None = None) -> Path:
    folder = env_dir or engine_env_dir()
    return folder / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def frozen() -> bool:
    """Whether this is the packaged (PyInstaller) app, which has no Python of its own to run the engine with."""
    return bool(getattr(sys, "frozen", False))


def engine_python() -> str:
    """The interpreter that runs the engine: $NIGHTSCHOOL_ENGINE_PYTHON, else the packaged app's engine environment
    once it is set up, else this one (a checkout or a pip install)."""
    env = os.environ.get("NIGHTSCHOOL_ENGINE_PYTHON")
    if env:
        return env
    if not frozen():
        return sys.executable
    python, ready = engine_env_python(), engine_ready()
    if ready.get("app_version") not in (None, app_version()):
        raise SetupError(f"The training engine is Nightschool {ready['app_version']}'s, this app is {app_version()}",
                         why="the app was updated; its engine is updated once, with what changed",
                         fix="run `nightschool engine setup` (a minute or two) or open the window, which offers it")
    if ready and python.is_file():
        return str(python)
    raise SetupError(
        "The training engine is not set up yet",
        why=f"the packaged app trains in its own Python environment ({engine_env_dir()}), made once on first start",
        fix="set it up from the first-run window or with `nightschool engine setup` (a few minutes, resumable); "
            "or set NIGHTSCHOOL_ENGINE_PYTHON to a Python that has Nightschool installed")


def engine_ready() -> dict:
    """What the engine environment's ready.json says (app_version, torch, cuda…); {} when it is not ready."""
    import json

    try:
        return json.loads((engine_env_dir() / ENGINE_READY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def engine_cwd() -> str:
    """The working dir of engine processes: the checkout (so `-m engine` finds it), the data dir when packaged."""
    return str(data_dir() if frozen() else CODE_ROOT)


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a process that is not this app (the engine, a system Python): the packaged app's loader
    points LD_LIBRARY_PATH at the bundle's libraries, which must not leak into another interpreter."""
    env = dict(os.environ)
    if frozen():
        for var in ("LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH"):
            original = env.pop(f"{var}_ORIG", None)
            if original is not None:
                env[var] = original
            else:
                env.pop(var, None)
    env.update(extra or {})
    return env


def app_version() -> str:
    """Nightschool's version: the installed distribution's, else pyproject.toml's in the checkout."""
    from importlib import metadata

    try:
        return metadata.version(APP_NAME)
    except metadata.PackageNotFoundError:
        pass
    try:
        import tomllib

        return tomllib.loads((CODE_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    except (OSError, KeyError, ValueError):
        return "0+unknown"


def accelerate_args(processes: int) -> list[str]:
    """`accelerate launch` options for a job with several processes: one process per GPU under FSDP when NVIDIA
    GPUs are found (resources/accelerate/fsdp.yaml), else CPU processes joined by gloo (cpu.yaml).

    NIGHTSCHOOL_ACCELERATE_CONFIG picks another config: a shipped name (fsdp, ddp, deepspeed_zero2, cpu) or the path
    of an accelerate YAML file. NIGHTSCHOOL_GPUS=N overrides GPU detection (0: CPU processes, even on a GPU machine;
    the engine then hides CUDA too). GPUs are counted without torch: NVML (nvidia-ml-py), else `nvidia-smi -L`,
    limited by CUDA_VISIBLE_DEVICES."""
    if processes < 1:
        raise SetupError(f"a job needs at least one process, not {processes}")
    gpus = gpu_count()
    choice = os.environ.get("NIGHTSCHOOL_ACCELERATE_CONFIG", "").strip()
    if choice:
        config = _accelerate_config(choice)
    elif gpus == 0:
        config = _accelerate_config("cpu")
    elif gpus < processes:
        raise SetupError(
            f"this job asks for {processes} processes but this machine has {gpus} GPU(s): with GPUs each process "
            f"needs its own. Run it with at most {gpus} process(es), or set NIGHTSCHOOL_GPUS=0 to run CPU processes.")
    else:
        config = _accelerate_config("fsdp")
    return ["--config_file", str(config), "--num_processes", str(processes), "--num_machines", "1"]


ACCELERATE_CONFIGS = CODE_ROOT / "resources" / "accelerate"


def _accelerate_config(choice: str) -> Path:
    """A shipped accelerate config by name, or a YAML file by path."""
    shipped = ACCELERATE_CONFIGS / f"{choice}.yaml"
    path = shipped if shipped.is_file() else Path(choice).expanduser()
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in ACCELERATE_CONFIGS.glob("*.yaml")))
        raise SetupError(f"NIGHTSCHOOL_ACCELERATE_CONFIG={choice!r} is neither a shipped config ({names}) nor a file")
    return path.resolve()


def gpu_count() -> int:
    """NVIDIA GPUs this process may use, found without torch: NIGHTSCHOOL_GPUS, else NVML, else `nvidia-smi -L`;
    CUDA_VISIBLE_DEVICES limits the count."""
    override = os.environ.get("NIGHTSCHOOL_GPUS", "").strip()
    if override:
        try:
            return max(int(override), 0)
        except ValueError:
            raise SetupError(f"NIGHTSCHOOL_GPUS must be a number of GPUs, not {override!r}") from None
    found = _nvml_count()
    if found is None:
        found = _nvidia_smi_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = []
        for item in visible.split(","):
            item = item.strip()
            if not item or item.startswith("-"):
                break  # CUDA stops at the first invalid id ("" or "-1" hides every GPU)
            ids.append(item)
        found = min(found, len(ids))
    return found


def _nvml_count() -> int | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no NVIDIA driver: no GPU
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _nvidia_smi_count() -> int:
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))
