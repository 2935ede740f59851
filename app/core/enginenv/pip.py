"""pip run inside the engine environment: output to the set-up log, Stop honoured, the environment's growth in
bytes reported while it works, a build's own "[k/n]" steps read back from the log (llama.cpp's compile writes no
bytes there for minutes), and a failure turned into what / why / what to do (offline, disk full…)."""
from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from app.core.base import paths
from app.core.enginenv.errors import EngineSetupError, SetupCancelled

OFFLINE = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable",
           "Max retries exceeded", "ConnectTimeoutError", "No route to host", "Name or service not known")
NO_MATCH = ("No matching distribution found", "Could not find a version that satisfies")
NO_SPACE = ("No space left on device", "Errno 28")
POLL_S = 1.0
STEP = re.compile(rb"^\s*\[(\d+)/(\d+)\] ", re.MULTILINE)  # ninja's status line: "[140/310] Building C object …"


def tree_bytes(folder: Path) -> int:
    """Bytes of the files under folder (what pip has written so far)."""
    total, stack = 0, [folder]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total


def run(python: Path, args: list[str], log: Path, what: str, watch: Path, on_bytes: Callable[[int], None],
        stop: threading.Event, on_step: Callable[[int, int], None] | None = None) -> None:
    """`python -m pip ARGS`; calls on_bytes(size of `watch`) about once a second, and on_step(k, n) before it when
    the output has a new "[k/n]" build step (pip shows a build's output with -v); SetupCancelled on stop."""
    env = paths.child_env({"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1", "PIP_NO_INPUT": "1",
                           "CMAKE_ARGS": os.environ.get("CMAKE_ARGS", "-DGGML_NATIVE=OFF")})
    command = [str(python), "-m", "pip", *args]
    with log.open("a", encoding="utf-8") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        steps = Steps(log, log.stat().st_size) if on_step else None
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=str(log.parent))
        while True:
            try:
                code = proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                if steps and (step := steps.latest()):
                    on_step(*step)
                on_bytes(tree_bytes(watch))
                if stop.is_set():
                    proc.terminate()
                    proc.wait()
                    raise SetupCancelled(f"Set-up stopped while {what}",
                                         why="what was installed stays in the environment",
                                         fix="set up again to go on from there") from None
    if steps and (step := steps.latest()):
        on_step(*step)
    on_bytes(tree_bytes(watch))
    if code != 0:
        raise failure(what, code, log)


class Steps:
    """The newest "[k/n]" step line the log got since `offset` (whole lines only: a half-written one waits)."""

    def __init__(self, log: Path, offset: int) -> None:
        self.log, self.offset, self.seen = log, offset, None

    def latest(self) -> tuple[int, int] | None:
        """(k, n) when a newer step than the last one returned was written, else None."""
        try:
            with self.log.open("rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except OSError:
            return None
        chunk = chunk[:chunk.rfind(b"\n") + 1]
        self.offset += len(chunk)
        found = [(int(k), int(n)) for k, n in STEP.findall(chunk)]
        if not found or found[-1] == self.seen:
            return None
        self.seen = found[-1]
        return self.seen


def failure(what: str, code: int, log: Path) -> EngineSetupError:
    text = log.read_text(encoding="utf-8", errors="replace")[-20000:]
    tail = " | ".join(line.strip() for line in text.strip().splitlines()[-4:])[-800:]
    if any(m in text for m in NO_SPACE):
        return EngineSetupError(f"The disk filled up while {what}", why=tail,
                                fix=f"free some space on the disk holding {log.parent} and set up again: what was "
                                    "installed stays")
    if any(m in text for m in OFFLINE):
        return EngineSetupError(f"Could not download while {what}: this machine seems to have no network",
                                why=tail, fix="connect to the network (or configure pip's index/proxy) and set up "
                                              "again: what was installed stays")
    if any(m in text for m in NO_MATCH):
        return EngineSetupError(f"pip found no suitable package while {what}", why=tail,
                                fix="check the network or pip's index settings (pip config list), then set up again")
    return EngineSetupError(f"pip failed while {what} (exit {code})", why=tail,
                            fix=f"the whole output is in {log}; set up again to retry, or `nightschool engine repair` "
                                "to start from a clean environment")
