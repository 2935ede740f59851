"""What the engine environment holds: pinned versions, the requirement list, torch's build (CPU or CUDA by the GPUs
NVML or nvidia-smi see), the Nightschool wheel to install and the folders where wheels are kept."""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from app.core.base import paths

# The packaged app carries these next to its resources (packaging/build.sh writes them).
BUNDLED = paths.CODE_ROOT / "resources" / "engine"
GUI_ONLY = {"pyside6-essentials", "pyside6", "pyqtgraph", "qasync"}  # the engine never imports Qt
# Bytes each stage adds to the environment, measured on Linux x86_64 (the ETA's yardstick; refined by each run).
EXPECTED_MB = {"venv": 20, "torch": 900, "torch-cuda": 5200, "llama": 25, "packages": 950, "nightschool": 8}
# CPU-seconds llama.cpp's compile takes (ninja runs on every core): 4.1 min on 2 busy cores here, 7 min on a user's
# 2-core laptop; the compile's ETA starts from this and trusts its own "[k/n]" steps more as they go on.
COMPILE_CPU_S = 700


@dataclass(frozen=True)
class Plan:
    """Everything one set-up needs, decided before the first byte is written."""

    env_dir: Path
    app_version: str
    torch: str  # the pin, "2.13.0"
    cuda: bool
    llama: str  # llama-cpp-python's pin
    requirements: list[str]
    constraints: Path | None
    app_source: Path  # the Nightschool wheel (packaged app) or the checkout
    wheel_dirs: list[Path] = field(default_factory=list)

    def fingerprint(self) -> dict:
        return {"app": self.app_version, "torch": self.torch, "cuda": self.cuda, "llama": self.llama,
                "requirements": self.requirements}


def make(env_dir: Path | None = None) -> Plan:
    constraints = _constraints_file()
    pins = _pins(constraints)
    return Plan(env_dir=env_dir or paths.engine_env_dir(), app_version=paths.app_version(),
                torch=pins.get("torch", "2.13.0"), cuda=paths.gpu_count() > 0,
                llama=pins.get("llama-cpp-python", "0.3.36"), requirements=requirements(),
                constraints=constraints, app_source=app_source(), wheel_dirs=wheel_dirs())


def requirements() -> list[str]:
    """The project's dependencies less the GUI's and torch (installed on its own, CPU or CUDA build)."""
    bundled = BUNDLED / "requirements.txt"
    if bundled.is_file():
        lines = bundled.read_text(encoding="utf-8").splitlines()
    else:
        project = tomllib.loads((paths.CODE_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        lines = project["dependencies"]
    return [r for r in (x.split("#")[0].strip() for x in lines) if r and _name(r) not in GUI_ONLY | {"torch"}]


def app_source() -> Path:
    """The Nightschool wheel the packaged app carries, else the checkout this code runs from."""
    wheels = sorted(BUNDLED.glob("nightschool-*.whl"))
    return wheels[-1] if wheels else paths.CODE_ROOT


def wheel_dirs() -> list[Path]:
    """Where built wheels are kept (llama-cpp-python's takes minutes to compile): the data dir's, the default data
    dir's (packaging/install.sh keeps it there) and $NIGHTSCHOOL_WHEELS."""
    found = [paths.wheels_dir(), Path(platformdirs.user_data_dir(paths.APP_NAME, appauthor=False)) / "wheels"]
    found += [Path(p).expanduser() for p in os.environ.get("NIGHTSCHOOL_WHEELS", "").split(os.pathsep) if p]
    unique: list[Path] = []
    for folder in found:
        if folder.is_dir() and folder.resolve() not in [u.resolve() for u in unique]:
            unique.append(folder)
    return unique


def kept_llama_wheel(plan: Plan) -> Path | None:
    for folder in plan.wheel_dirs:
        if wheels := sorted(folder.glob(f"llama_cpp_python-{plan.llama}-*.whl")):
            return wheels[-1]
    return None


def kept_llama_source(plan: Plan) -> Path | None:
    for folder in plan.wheel_dirs:
        if (sdist := folder / f"llama_cpp_python-{plan.llama}.tar.gz").is_file():
            return sdist
    return None


def expected_bytes(stage: str, plan: Plan) -> int:
    key = "torch-cuda" if stage == "torch" and plan.cuda else stage
    return EXPECTED_MB.get(key, 0) * 1024 * 1024


def compile_seconds() -> float:
    """How long llama.cpp's compile is expected to take on this machine."""
    return max(60.0, COMPILE_CPU_S / max(1, os.cpu_count() or 1))


def _constraints_file() -> Path | None:
    for candidate in (BUNDLED / "constraints.txt", paths.CODE_ROOT / "packaging" / "constraints.txt"):
        if candidate.is_file():
            return candidate
    return None


def _pins(constraints: Path | None) -> dict[str, str]:
    if constraints is None:
        return {}
    pins = {}
    for line in constraints.read_text(encoding="utf-8").splitlines():
        if m := re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;#]+)", line):
            pins[_name(m.group(1))] = m.group(2)
    return pins


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")
