"""A real local Ray head for tests and benches: loopback only, 1 CPU, free ports, its own temp dir; stopped by ending
exactly the processes that belong to it (those whose command line or working dir is under its temp dir, and their
children), never with `ray stop`, which ends every Ray process of the user on the machine."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    """The environment a head and its jobs run in: this venv's `python` first on PATH (the job entrypoint)."""
    return {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", "RAY_USAGE_STATS_ENABLED": "0"}


def start(tmp: Path, timeout: float = 120.0) -> str:
    """Start the head; returns its job-submission address once the job API answers."""
    dash = free_port()
    subprocess.run([str(VENV_BIN / "ray"), "start", "--head", "--temp-dir", str(tmp), "--num-cpus", "1",
                    "--node-ip-address", "127.0.0.1", "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
                    "--port", str(free_port()), "--ray-client-server-port", str(free_port()),
                    "--include-dashboard", "true", "--disable-usage-stats"],
                   env=env(), check=True, capture_output=True, text=True, timeout=timeout)
    from ray.job_submission import JobSubmissionClient

    address = f"http://127.0.0.1:{dash}"
    deadline = time.monotonic() + 60
    while True:  # the job API comes up a moment after `ray start` returns
        try:
            JobSubmissionClient(address).list_jobs()
            return address
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def stop(tmp: Path, grace: float = 10.0) -> None:
    """End this head's processes (SIGTERM, then SIGKILL after `grace`) and remove its temp dir."""
    import psutil

    mark = str(tmp)
    mine: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if mark in " ".join(proc.info["cmdline"] or []) or proc.cwd().startswith(mark):
                for p in [proc, *proc.children(recursive=True)]:
                    mine[p.pid] = p
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    mine.pop(os.getpid(), None)
    for p in mine.values():
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(list(mine.values()), timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    shutil.rmtree(tmp, ignore_errors=True)
