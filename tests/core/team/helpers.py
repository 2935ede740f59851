"""The team tests' parts: a real `nightschool team serve` subprocess, members' data dirs joined to it, the CLI."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from sqlalchemy import select

from app.core.base.paths import CODE_ROOT
from app.core.base.schema import AgentSession, MessageRow
from app.core.base.store import Store
from app.core.capture.rows import parts_text
from app.core.team import member as team_member
from tests.core.datasets.helpers import ingest, write_session

SECRET = "ghp_" + "Zq7Xv2Lp9Rt4Wm8Kc3Nd6Hj1Bf5Gs0Ya2Ue"
DEADLINE = 20.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def env_for(home: Path, config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NIGHTSCHOOL_DATABASE_URL"}
    env.update(NIGHTSCHOOL_HOME=str(home), NIGHTSCHOOL_CONFIG=str(config), PYTHONPATH=str(CODE_ROOT))
    return env


def cli(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli.main", *args], env=env, input=stdin, text=True,
                          capture_output=True, timeout=60, cwd=CODE_ROOT, check=False)


class Server:
    """database: the team school's PostgreSQL URL (None: the data dir's SQLite file)."""

    def __init__(self, home: Path, config: Path, database: str | None = None) -> None:
        self.env, self.port, self.proc = env_for(home, config), free_port(), None
        self.home, self.database = home, database
        if database:
            self.env["NIGHTSCHOOL_DATABASE_URL"] = database
        self.url = f"http://127.0.0.1:{self.port}"
        self.tokens: dict[str, str] = {}  # member -> token, as invited

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "app.cli.main", "team", "serve", "--port",
                                      str(self.port)], env=self.env, cwd=CODE_ROOT, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.url}/v1/status", timeout=10).close()
                raise AssertionError("/v1/status answered without a member's token")
            except urllib.error.HTTPError as exc:
                assert exc.code == 401, exc.code  # up, and members only
                return
            except OSError:
                assert self.proc.poll() is None, "the team server exited"
                time.sleep(0.1)
        raise AssertionError("the team server did not answer in time")

    def status(self, member: str = "alice") -> dict:
        request = urllib.request.Request(f"{self.url}/v1/status",
                                         headers={"Authorization": f"Bearer {self.tokens[member]}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def store(self) -> Store:
        """The team school's store, opened from this process."""
        return Store(self.database or self.home / "nightschool.db")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def join_member(tmp_path: Path, monkeypatch, server: Server, name: str, sessions: range) -> Store:
    """A member's data dir with sessions (a secret planted) ingested, joined with a fresh invitation."""
    as_member(monkeypatch, tmp_path, name)
    folder = tmp_path / f"{name}-transcripts"
    for i in sessions:
        write_session(folder, i, extra_user=f" (my token is {SECRET})")
    store = Store()
    if sessions:
        ingest(store, folder)
    invited = cli(server.env, "team", "invite", name, "--json")
    assert invited.returncode == 0, invited.stderr
    server.tokens[name] = json.loads(invited.stdout)["token"]
    team_member.join(server.url, server.tokens[name])
    return store


def as_member(monkeypatch, tmp_path: Path, name: str) -> None:
    """This process acts as member `name` (its data dir, its own SQLite store)."""
    monkeypatch.setenv("NIGHTSCHOOL_HOME", str(tmp_path / name))
    monkeypatch.delenv("NIGHTSCHOOL_DATABASE_URL", raising=False)


def as_server(monkeypatch, server: Server) -> None:
    """This process acts on the team server's data dir and its store (PostgreSQL where the server has one)."""
    monkeypatch.setenv("NIGHTSCHOOL_HOME", str(server.home))
    if server.database:
        monkeypatch.setenv("NIGHTSCHOOL_DATABASE_URL", server.database)
    else:
        monkeypatch.delenv("NIGHTSCHOOL_DATABASE_URL", raising=False)


def server_rows(server: Server) -> tuple[list, list]:
    store = server.store()
    try:
        with store.engine.connect() as conn:
            return (conn.execute(select(AgentSession.id, AgentSession.member)).all(),
                    [(r.text, parts_text(r)) for r in conn.execute(
                        select(MessageRow.text, MessageRow.parts_json, MessageRow.parts_z))])
    finally:
        store.close()
