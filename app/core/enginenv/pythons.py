"""A Python the engine environment can be made from: 3.11–3.13 with `venv` and `ensurepip` (Debian splits them
into python3-venv), found on PATH or named by $NIGHTSCHOOL_SETUP_PYTHON."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from app.core.base import paths
from app.core.enginenv.errors import EngineSetupError

SUPPORTED = ((3, 11), (3, 12), (3, 13))
NAMES = ("python3.11", "python3.12", "python3.13", "python3")
PROBE = "import sys, venv, ensurepip; print('%d.%d' % sys.version_info[:2])"


def find() -> tuple[str, str]:
    """(interpreter path, "3.11") of the first compatible Python; EngineSetupError saying what was tried."""
    tried: list[str] = []
    for candidate in candidates():
        version, problem = check(candidate)
        if version:
            return candidate, version
        tried.append(f"{candidate}: {problem}")
    raise EngineSetupError(
        "No Python to build the training engine with",
        why="the engine runs in its own environment made from a Python 3.11, 3.12 or 3.13 with venv; "
            + ("tried " + "; ".join(tried) if tried else "none was found on PATH"),
        fix="install one (Debian/Ubuntu: `sudo apt install python3 python3-venv`; Fedora: `sudo dnf install "
            "python3`), or point NIGHTSCHOOL_SETUP_PYTHON at one, then set up again")


def candidates() -> list[str]:
    named = os.environ.get("NIGHTSCHOOL_SETUP_PYTHON")
    if named:
        return [named]
    found = [] if paths.frozen() else [sys.executable]
    for name in NAMES:
        if (path := shutil.which(name)) and path not in found:
            found.append(path)
    return found


def check(python: str) -> tuple[str | None, str]:
    """(version, "") when `python` can make the environment, else (None, why not)."""
    try:
        done = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=30,
                              env=paths.child_env(), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"does not run ({exc})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, ("has no venv/ensurepip (Debian: python3-venv)" if "venv" in last or "ensurepip" in last
                      else last)
    version = done.stdout.strip()
    if tuple(int(x) for x in version.split(".")) not in SUPPORTED:
        return None, f"is Python {version} (3.11–3.13 needed)"
    return version, ""
