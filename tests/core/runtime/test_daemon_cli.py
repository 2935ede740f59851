"""`nightschool daemon`: a REAL daemon process holds the data dir (ready for systemd: READY=1, watchdog pings), a
second one is refused naming the holder, SIGTERM stops it cleanly and frees the lock, a stale lock is taken over,
`daemon stop` waits for the lock to be free; `daemon install` writes a systemd user unit only where systemd answers."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from app.core.runtime.machinery import lock

REPO = Path(__file__).resolve().parents[3]
READY_S = 60  # a daemon's start: imports, store migrations, the loops (2 busy cores)


def env_for(home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")}
    return {**env, "NIGHTSCHOOL_HOME": str(home), "PYTHONUNBUFFERED": "1", **extra}


def cli(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli.main", *args], cwd=REPO, env=env_for(home, **extra),
                          capture_output=True, text=True, timeout=120)


def no_capture_roots(home: Path) -> None:
    """The daemon's capture watches nothing (never this machine's real agent folders)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "capture.json").write_text(json.dumps({"roots": {}}), encoding="utf-8")


@pytest.fixture
def daemons(ns_home):
    """Start daemon processes on the test's data dir; any still alive at the end are killed."""
    started: list[subprocess.Popen] = []

    def start(**extra: str) -> subprocess.Popen:
        no_capture_roots(ns_home)
        out = (ns_home / f"daemon-{len(started)}.out").open("ab")
        proc = subprocess.Popen([sys.executable, "-m", "app.cli.main", "daemon"], cwd=REPO,
                                env=env_for(ns_home, **extra), stdout=out, stderr=subprocess.STDOUT)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def wait_for_holder(proc: subprocess.Popen, home: Path) -> dict:
    """lock.holder() naming this process, with a deadline; fails at once if the daemon exits."""
    deadline = time.monotonic() + READY_S
    while True:
        found = lock.holder()
        if found and found.get("pid") == proc.pid:
            return found
        if proc.poll() is not None:
            raise AssertionError(f"the daemon exited {proc.returncode}: {output(home)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no runtime held the lock after {READY_S} s: {output(home)}")
        time.sleep(0.1)


def output(home: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(home.glob("daemon-*.out")))


def notifications(sock: socket.socket, wanted: set[str]) -> list[str]:
    """Datagrams on the fake NOTIFY_SOCKET until every wanted line was seen (the socket's timeout is the deadline)."""
    seen: list[str] = []
    while not wanted <= {line for msg in seen for line in msg.splitlines()}:
        seen.append(sock.recv(4096).decode("latin-1"))
    return seen


def test_a_real_daemon_runs_alone_and_stops_cleanly_on_sigterm(ns_home, daemons):
    address = f"@nightschool-test-{uuid.uuid4().hex}"  # an abstract socket: no path length limit, nothing to clean
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind("\0" + address[1:])
        notify.settimeout(READY_S)
        proc = daemons(NOTIFY_SOCKET=address, WATCHDOG_USEC="1000000")
        holder = wait_for_holder(proc, ns_home)
        assert holder["role"] == "daemon" and holder["channel"]
        said = notifications(notify, {"READY=1", "WATCHDOG=1"})  # systemd's readiness, then a ping each 0.5 s
        assert any(line.startswith("STATUS=") for msg in said for line in msg.splitlines())

    second = cli(ns_home, "daemon")
    assert second.returncode == 1
    assert f"pid {proc.pid}" in second.stderr and "already runs" in second.stderr

    status = cli(ns_home, "school", "status", "--json")
    assert status.returncode == 0, status.stderr
    runtime = json.loads(status.stdout)["runtime"]
    assert runtime["role"] == "daemon" and runtime["pid"] == proc.pid
    shown = cli(ns_home, "daemon", "status", "--json")
    assert json.loads(shown.stdout)["runtime"]["pid"] == proc.pid

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, output(ns_home)
    assert lock.holder() is None
    assert not (ns_home / "runtime" / "runtime.json").exists()
    log = (ns_home / "logs" / "daemon.log").read_text()
    assert "stopping (SIGTERM)" in log and "runtime stopped" in log
    assert "no runtime runs" in cli(ns_home, "daemon", "status").stdout


def test_a_stale_lock_is_taken_over_and_daemon_stop_waits_for_the_lock(ns_home, daemons):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid names no live process now; nobody holds the flock
    folder = ns_home / "runtime"
    folder.mkdir(parents=True)
    (folder / "runtime.json").write_text(json.dumps({"pid": gone.pid, "started": time.time() - 60, "role": "daemon",
                                                     "channel": "", "token": "stale"}), encoding="utf-8")
    assert lock.holder() is None

    proc = daemons()
    holder = wait_for_holder(proc, ns_home)
    assert holder["pid"] == proc.pid and holder["token"] != "stale"

    stopped = cli(ns_home, "daemon", "stop", "--timeout", "60")
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped" in stopped.stdout
    assert proc.wait(timeout=30) == 0
    assert lock.holder() is None
    assert cli(ns_home, "daemon", "stop").stdout.startswith("no daemon runs")


def fake_systemctl(folder: Path) -> Path:
    """A STAND-IN for systemctl (systemd cannot run here): it records its arguments and succeeds."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "systemctl"
    script.write_text('#!/bin/sh\necho "$@" >> "$FAKE_SYSTEMCTL_LOG"\nexit 0\n', encoding="utf-8")
    script.chmod(0o755)
    return script


def test_install_writes_a_unit_only_where_systemd_answers(ns_home, tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    empty = tmp_path / "empty-bin"
    empty.mkdir()

    none = cli(ns_home, "daemon", "install", PATH=str(empty), XDG_CONFIG_HOME=str(config))
    assert none.returncode == 1
    assert "Nothing was installed" in none.stdout and "autostart" in none.stdout and "daemon" in none.stdout
    assert list(config.rglob("*")) == []

    bin_dir, calls = tmp_path / "bin", tmp_path / "systemctl.log"
    fake_systemctl(bin_dir)
    extra = {"PATH": str(bin_dir), "XDG_CONFIG_HOME": str(config), "FAKE_SYSTEMCTL_LOG": str(calls)}
    done = cli(ns_home, "daemon", "install", **extra)
    assert done.returncode == 0, done.stderr
    unit = config / "systemd" / "user" / "nightschool.service"
    text = unit.read_text()
    script = Path(sys.executable).with_name("nightschool")
    argv = f"{script} daemon" if script.is_file() else f"{sys.executable} -m app.cli.main daemon"
    exec_start = f"ExecStart={argv}"
    for line in ("Type=notify", "WatchdogSec=60", "Restart=on-failure", exec_start,
                 f"Environment=NIGHTSCHOOL_HOME={ns_home}", "WantedBy=default.target"):
        assert line in text.splitlines(), (line, text)
    said = calls.read_text().splitlines()
    assert "--user daemon-reload" in said and "--user enable --now nightschool.service" in said

    gone = cli(ns_home, "daemon", "uninstall", **extra)
    assert gone.returncode == 0, gone.stderr
    assert not unit.exists()
    assert "--user disable --now nightschool.service" in calls.read_text().splitlines()
