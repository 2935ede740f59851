"""Driving a real daemon subprocess from tests: start it on a data dir, wait for conditions, kill it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[3]


def start_daemon(home: Path) -> subprocess.Popen:
    """`nightschool daemon` on `home`; returns once it holds the data dir's lock and its status channel is named
    there (the lock names the pid first, the channel just after: a viewer that came in between found no channel)."""
    from app.core.runtime.machinery import lock

    env = {**os.environ, "NIGHTSCHOOL_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    log = (home / "daemon-test.log").open("ab")
    proc = subprocess.Popen([sys.executable, "-m", "app.cli.main", "daemon"], cwd=REPO, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    wait_for(lambda: (lock.holder() or {}).get("pid") == proc.pid and "channel" in lock.holder(), 120,
             "the daemon to hold the lock and open its status channel",
             alive=lambda: proc.poll() is None)
    return proc


def wait_for(condition: Callable[[], object], timeout: float, what: str, alive: Callable[[], bool] | None = None,
             every: float = 0.5):
    """Poll a condition on the store/filesystem with a deadline (the daemon is another process)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if alive is not None and not alive():
            raise AssertionError(f"the daemon died while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def cli_json(home: Path, *args: str) -> object:
    env = {**os.environ, "NIGHTSCHOOL_HOME": str(home)}
    out = subprocess.run([sys.executable, "-m", "app.cli.main", *args, "--json"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def log_tail(home: Path, lines: int = 60) -> str:
    path = home / "daemon-test.log"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""
