"""Set up the engine environment in stages (python → venv → torch → llama → packages → nightschool → probe), each
recorded when done so an interrupted set-up goes on where it stopped; its status (ready, missing, partial, outdated,
broken, external) for the window, the CLI and the job launcher."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from app.core.base import files, paths
from app.core.base.words import eta_words
from app.core.enginenv import pip, plan as plans, probe, pythons
from app.core.enginenv.errors import EngineSetupError, SetupCancelled

STATE = "setup.json"
LOG = "engine-setup.log"
DISK_MARGIN = 1024 ** 3  # pip unpacks wheels in a temp dir too
MB = 1_000_000


@dataclass
class EngineStatus:
    state: str  # ready | missing | partial | outdated | broken | external
    python: str | None
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SetupProgress:
    stage: str
    label: str
    index: int
    stages: int
    bytes_done: int
    bytes_total: int | None
    eta_s: float | None
    step: int | None = None  # a build's own steps (llama.cpp's compile: ninja's "[k/n]"), while it runs
    steps: int | None = None
    done: int | None = None  # per mille of the whole set-up, never less than reported before (else from the above)

    def words(self) -> tuple[str, str]:
        """What the wizard and the terminal say: ("4 of 7 · compiling llama.cpp…", "step 140 of 310 · about 3 min
        left") or ("3 of 7 · installing torch…", "120 of 850 MB · about 3 min left")."""
        if self.steps:
            size = f"step {self.step} of {self.steps}"
        elif self.bytes_total:
            size = f"{self.bytes_done / MB:.0f} of {self.bytes_total / MB:.0f} MB"
        else:
            size = f"{self.bytes_done / MB:.0f} MB" if self.bytes_done else ""
        return f"{self.index} of {self.stages} · {self.label}", " · ".join(x for x in (size, eta_words(self.eta_s)) if x)

    def share(self) -> int:
        """Per mille of the whole set-up done: the finished stages plus this one's part (its build steps, else the
        bytes written)."""
        if self.done is not None:
            return self.done
        if self.steps:
            part = min(1.0, (self.step or 0) / self.steps)
        else:
            part = min(1.0, self.bytes_done / self.bytes_total) if self.bytes_total else 0.0
        return max(0, min(1000, round(1000 * (self.index - 1 + part) / max(1, self.stages))))


def stages(p: plans.Plan) -> list[tuple[str, str]]:
    build = "CUDA" if p.cuda else "CPU"
    return [("python", "finding a Python"), ("venv", "creating the environment"),
            ("torch", f"installing torch {p.torch} ({build} build)"),
            ("llama", f"installing llama-cpp-python {p.llama}"),
            ("packages", "installing transformers, PEFT, TRL and the rest"),
            ("nightschool", f"installing Nightschool {p.app_version}'s engine"),
            ("probe", "checking that it all imports")]


def status(check: bool = False) -> EngineStatus:
    """Where the engine stands; check=True also runs the import probe on a ready environment (a few seconds)."""
    env_dir = paths.engine_env_dir()
    python = paths.engine_env_python(env_dir)
    ready = paths.engine_ready()
    if named := os.environ.get("NIGHTSCHOOL_ENGINE_PYTHON"):
        return EngineStatus("external", named, "NIGHTSCHOOL_ENGINE_PYTHON names the engine's Python")
    if ready:
        if ready.get("app_version") != paths.app_version():
            return EngineStatus("outdated", str(python), f"the engine is Nightschool {ready.get('app_version')}'s; "
                                                         f"this app is {paths.app_version()}: set up again (minutes)")
        if not python.is_file():
            return EngineStatus("broken", str(python), f"{python} is gone: repair the environment")
        if check and not (found := probe.run(python))["ok"]:
            return EngineStatus("broken", str(python), f"it does not import: {found['reason']}")
        return EngineStatus("ready", str(python), f"torch {ready.get('torch', '?')} "
                                                  f"({'CUDA' if ready.get('cuda') else 'CPU'}) in {env_dir}")
    if not paths.frozen():
        return EngineStatus("external", sys.executable, "this app runs from a Python that has the engine installed")
    if (env_dir / STATE).is_file():
        done = len(_read(env_dir / STATE).get("done", {}))
        return EngineStatus("partial", None, f"set-up was interrupted after {done} stages: set up again to go on")
    return EngineStatus("missing", None, "the training engine is not set up yet (a few minutes, once)")


def run(on_progress: Callable[[SetupProgress], None] | None = None, stop: threading.Event | None = None,
        repair: bool = False) -> EngineStatus:
    """Set up (or finish, or repair) the engine environment; blocking; EngineSetupError says what went wrong."""
    env_dir = paths.engine_env_dir()
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    with _lock(env_dir.parent / "engine-env.lock"):
        if repair and env_dir.exists():
            shutil.rmtree(env_dir)
        env_dir.mkdir(parents=True, exist_ok=True)
        Setup(plans.make(env_dir), on_progress or (lambda _p: None), stop or threading.Event()).run()
    return status()


class Setup:
    """One set-up run over the stages not done yet."""

    def __init__(self, plan: plans.Plan, report: Callable[[SetupProgress], None], stop: threading.Event) -> None:
        self.plan, self.report, self.stop = plan, report, stop
        self.env_dir = plan.env_dir
        self.python = paths.engine_env_python(self.env_dir)
        self.log = self.env_dir.parent / LOG
        self.state = _read(self.env_dir / STATE) or {"done": {}}
        self.stages = stages(plan)
        self.base_python = ""
        self.compile = Compile(plans.compile_seconds())

    def key(self, stage: str) -> str:
        """What a finished stage was done for: when it changes (a new app version, a GPU appeared), it runs again."""
        f = self.plan.fingerprint()
        return json.dumps({"venv": None, "torch": [f["torch"], f["cuda"]], "llama": f["llama"],
                           "packages": f["requirements"], "nightschool": f["app"]}.get(stage), sort_keys=True)

    def pending(self) -> list[str]:
        done = self.state["done"]
        if not self.python.is_file():
            done.clear()  # no interpreter: nothing recorded can be trusted
        return [s for s, _ in self.stages if s in ("python", "probe") or done.get(s) != self.key(s)]

    def run(self) -> None:
        todo = self.pending()
        if set(todo) - {"python", "probe"}:  # something to install: not ready until the probe says so again
            (self.env_dir / paths.ENGINE_READY).unlink(missing_ok=True)
        self.check_disk(todo)
        self.started, self.base, self.shown = time.monotonic(), pip.tree_bytes(self.env_dir), 0
        self.total = sum(plans.expected_bytes(s, self.plan) for s in todo) or None
        self.compile.pending = "llama" in todo and plans.kept_llama_wheel(self.plan) is None
        for index, (stage, label) in enumerate(self.stages, 1):
            if self.stop.is_set():
                raise SetupCancelled("Set-up stopped", why="what was installed stays",
                                     fix="set up again to go on from there")
            if stage not in todo:
                continue
            self.current = (stage, label, index)
            self.progress(pip.tree_bytes(self.env_dir))
            getattr(self, f"do_{stage}")()
            self.state["done"][stage] = self.key(stage)
            files.atomic_write(self.env_dir / STATE, json.dumps(self.state, indent=1))

    def progress(self, size: int) -> None:
        stage, label, index = self.current
        done = max(size - self.base, 0)
        step, steps = self.compile.step if self.compile.running else (None, None)
        p = SetupProgress(stage, label, index, len(self.stages), done, self.total, self.eta(done), step, steps or None)
        p.done = self.shown = max(self.shown, p.share())  # the bar does not go back once the compile's steps end
        self.report(p)

    def eta(self, done: int, now: float | None = None) -> float | None:
        """Seconds left: the bytes still to write at the rate measured so far (the compile's time left out of it),
        plus the compile's time left while it runs or is still to come. None until there is a rate (or, compiling,
        the compile's own time left: it is most of what remains)."""
        now = time.monotonic() if now is None else now
        byte_s = now - self.started - self.compile.spent(now)
        rate = done / byte_s if done > 1024 ** 2 and byte_s > 0 else None
        bytes_left = max((self.total or 0) - done, 0)
        if rate is None and bytes_left and not self.compile.running:
            return None
        left = self.compile.left(now) + (bytes_left / rate if rate else 0.0)
        return left if left > 0 else None

    def pip(self, args: list[str], what: str, on_step: Callable[[int, int], None] | None = None) -> None:
        pip.run(self.python, args, self.log, what, self.env_dir, self.progress, self.stop, on_step)

    def check_disk(self, todo: list[str]) -> None:
        need = sum(plans.expected_bytes(s, self.plan) for s in todo) + DISK_MARGIN
        free = shutil.disk_usage(self.env_dir).free
        if free < need:
            raise EngineSetupError(
                "Not enough disk space to set up the training engine",
                why=f"it needs about {need / 1024 ** 3:.1f} GB and {self.env_dir} has {free / 1024 ** 3:.1f} GB free",
                fix="free some space, or move the data dir to a bigger disk (NIGHTSCHOOL_HOME), and set up again")

    # --- stages ------------------------------------------------------------------------------
    def do_python(self) -> None:
        self.base_python = pythons.find()[0] if not self.python.is_file() else str(self.python)

    def do_venv(self) -> None:
        if self.python.is_file() and subprocess.run([str(self.python), "-m", "pip", "--version"],
                                                    capture_output=True, env=paths.child_env()).returncode == 0:
            return
        shutil.rmtree(self.env_dir / "bin", ignore_errors=True)
        shutil.rmtree(self.env_dir / "lib", ignore_errors=True)
        done = subprocess.run([self.base_python, "-m", "venv", str(self.env_dir)], capture_output=True, text=True,
                              env=paths.child_env())
        if done.returncode != 0:
            raise EngineSetupError(f"Could not create the engine environment in {self.env_dir}",
                                   why=(done.stderr.strip().splitlines() or ["venv failed"])[-1],
                                   fix="install python3-venv (Debian/Ubuntu) or name another Python with "
                                       "NIGHTSCHOOL_SETUP_PYTHON, then set up again")

    def do_torch(self) -> None:
        args = ["install", f"torch=={self.plan.torch}"]
        if not self.plan.cuda and not self.local_cpu_torch():
            args += ["--index-url", "https://download.pytorch.org/whl/cpu"]  # PyPI's default build is CUDA (GBs)
        self.pip(args, "installing torch")

    def local_cpu_torch(self) -> bool:
        """Whether pip's configured find-links already hold torch's CPU wheel (then no other index is needed)."""
        got = subprocess.run([str(self.python), "-m", "pip", "config", "get", "global.find-links"],
                             capture_output=True, text=True, env=paths.child_env())
        folders = [Path(x) for x in got.stdout.split()] if got.returncode == 0 else []
        return any(f.glob(f"torch-{self.plan.torch}*cpu*.whl") for f in folders if f.is_dir())

    def do_llama(self) -> None:
        wheel = plans.kept_llama_wheel(self.plan)
        if wheel is None:  # compile once and keep the wheel (minutes on a laptop); -v: its "[k/n]" steps in the log
            what = "compiling llama.cpp (minutes: only the first time)"
            stage, _label, index = self.current
            self.current = (stage, what, index)
            self.compile.start()
            try:
                self.pip(["wheel", "-v", "--no-deps", f"llama-cpp-python=={self.plan.llama}", "-w",
                          str(paths.wheels_dir())], what, on_step=self.compile.on_step)
            finally:
                self.compile.end()
                self.current = (stage, _label, index)
            wheel = plans.kept_llama_wheel(self.plan)  # paths.wheels_dir() is one of the plan's wheel dirs
            if wheel is None:
                raise EngineSetupError("llama.cpp was compiled but its wheel was not found",
                                       why=f"pip wheel wrote nothing named llama_cpp_python-{self.plan.llama}-*.whl "
                                           f"into {paths.wheels_dir()}", fix=f"the whole output is in {self.log}")
        if plans.kept_llama_source(self.plan) is None:  # its source holds llama.cpp's GGUF converter
            self.pip(["download", "--no-deps", "--no-binary", ":all:", f"llama-cpp-python=={self.plan.llama}",
                      "-d", str(paths.wheels_dir())], "fetching llama.cpp's converter")
        self.pip(["install", "--no-deps", str(wheel)], "installing llama-cpp-python")

    def do_packages(self) -> None:
        args = ["install", *self.find_links(), *self.plan.requirements]
        if self.plan.constraints:
            args[1:1] = ["-c", str(self.plan.constraints)]
        self.pip(args, "installing transformers, PEFT, TRL")

    def do_nightschool(self) -> None:
        self.pip(["install", "--no-deps", "--force-reinstall", str(self.plan.app_source)],
                 "installing Nightschool's engine")

    def do_probe(self) -> None:
        found = probe.run(self.python)
        if not found["ok"]:
            (self.env_dir / paths.ENGINE_READY).unlink(missing_ok=True)
            raise EngineSetupError("The engine environment was installed but does not import",
                                   why=found["reason"], fix="`nightschool engine repair` starts from a clean "
                                                            "environment (the downloads are cached)")
        ready = {"app_version": self.plan.app_version, "python": found.get("python"), "torch": found.get("torch"),
                 "cuda": found.get("cuda", False), "at": datetime.now(UTC).isoformat(timespec="seconds"),
                 "seconds": round(time.monotonic() - self.started, 1)}
        files.atomic_write(self.env_dir / paths.ENGINE_READY, json.dumps(ready, indent=1))

    def find_links(self) -> list[str]:
        return [a for d in self.plan.wheel_dirs for a in ("--find-links", str(d))]


class Compile:
    """llama.cpp's compile for the ETA: it writes nothing into the environment for minutes, so its time left comes
    from its "[k/n]" steps and the expected duration (plan.compile_seconds)."""

    def __init__(self, expected_s: float) -> None:
        self.expected_s = expected_s
        self.pending = False  # still to come in this set-up
        self.started: float | None = None
        self.step: tuple[int, int] = (0, 0)
        self.spent_s = 0.0  # in compiles that ended

    @property
    def running(self) -> bool:
        return self.started is not None

    def start(self) -> None:
        self.started, self.step = time.monotonic(), (0, 0)

    def on_step(self, k: int, n: int) -> None:
        self.step = (k, n)

    def end(self) -> None:
        if self.started is not None:
            self.spent_s += time.monotonic() - self.started
        self.started, self.pending = None, False

    def spent(self, now: float) -> float:
        return self.spent_s + (now - self.started if self.started is not None else 0.0)

    def left(self, now: float) -> float:
        """Seconds left: the expected time share still to come, at this machine's speed as measured so far —
        trusted by the time share done. On a 4.1-min compile of 0.3.36 (2 cores) expecting 5.8 min, it said 344 s
        left at 10 % of the steps (235 s were), 149 s at half-way (127), 7 s at 90 % (9)."""
        if self.started is None:
            return self.expected_s if self.pending else 0.0
        ran = now - self.started
        k, n = self.step
        w = min(k / n, 1.0) if n else 0.0
        done = 3 * w * w - 2 * w ** 3  # the time share w of the steps took: the big C++ files sit in the middle
        if done <= 0:
            return max(self.expected_s - ran, 30.0)
        speed = ran / (done * self.expected_s)  # > 1: this machine is slower than expected
        return (1 - done) * self.expected_s * (done * speed + 1 - done)


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


class _lock:
    """One set-up at a time per data dir (the window and the CLI may both try)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self):
        self.fh = self.path.open("a+")
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fh.close()
            raise EngineSetupError("The engine is already being set up", why="another window or command is doing it",
                                   fix="wait for it to finish (`nightschool engine status`)") from None
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()
