"""Team mode end to end: a real server subprocess, two members' data dirs, spool, drain, kill, revoke, withdraw."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from sqlalchemy import select

from app.core.base.paths import CODE_ROOT
from app.core.base.schema import AgentSession, MessageRow
from app.core.base.store import Store
from app.core.team import member as team_member
from tests.core.datasets.helpers import ingest, write_session

SECRET = "ghp_" + "Zq7Xv2Lp9Rt4Wm8Kc3Nd6Hj1Bf5Gs0Ya2Ue"
DEADLINE = 20.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(home: Path, config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NIGHTSCHOOL_DATABASE_URL"}
    env.update(NIGHTSCHOOL_HOME=str(home), NIGHTSCHOOL_CONFIG=str(config), PYTHONPATH=str(CODE_ROOT))
    return env


def _cli(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli.main", *args], env=env, input=stdin, text=True,
                          capture_output=True, timeout=60, cwd=CODE_ROOT, check=False)


class Server:
    def __init__(self, home: Path, config: Path) -> None:
        self.env, self.port, self.proc = _env(home, config), _free_port(), None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "app.cli.main", "team", "serve", "--port",
                                      str(self.port)], env=self.env, cwd=CODE_ROOT, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            try:
                return self.status() and None
            except OSError:
                assert self.proc.poll() is None, "the team server exited"
                time.sleep(0.1)
        raise AssertionError("the team server did not answer in time")

    def status(self) -> dict:
        with urllib.request.urlopen(f"{self.url}/v1/status", timeout=10) as response:
            return json.loads(response.read())

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def team(tmp_path, monkeypatch):
    server = Server(tmp_path / "server", tmp_path / "server-config")
    server.start()
    yield server, tmp_path
    server.kill()


def _member(tmp_path: Path, monkeypatch, server: Server, name: str, sessions: range) -> Store:
    """A member's data dir with sessions (a secret planted) ingested, joined with a fresh invitation."""
    home = tmp_path / name
    monkeypatch.setenv("NIGHTSCHOOL_HOME", str(home))
    folder = tmp_path / f"{name}-transcripts"
    for i in sessions:
        write_session(folder, i, extra_user=f" (my token is {SECRET})")
    store = Store()
    ingest(store, folder)
    invited = _cli(server.env, "team", "invite", name, "--json")
    assert invited.returncode == 0, invited.stderr
    team_member.join(server.url, json.loads(invited.stdout)["token"])
    return store


def _as(monkeypatch, tmp_path: Path, name: str) -> None:
    monkeypatch.setenv("NIGHTSCHOOL_HOME", str(tmp_path / name))


def _server_rows(tmp_path: Path) -> tuple[list, list]:
    store = Store(tmp_path / "server" / "nightschool.db")
    try:
        with store.engine.connect() as conn:
            return (conn.execute(select(AgentSession.id, AgentSession.member)).all(),
                    conn.execute(select(MessageRow.text, MessageRow.parts_json)).all())
    finally:
        store.close()


def _pooled_build_counts_each_member(tmp_path: Path, monkeypatch, tiny_model: Path) -> None:
    """The team school builds on the pooled corpus; what the cycle's report card shows per member are counts."""
    from app.core.datasets.catalog import Registry
    from app.core.datasets.config import BuildConfig
    from app.core.datasets.runs import start_build
    from app.core.runtime.school.stages import members_of

    _as(monkeypatch, tmp_path, "server")
    store = Store()
    try:
        done = start_build(store, BuildConfig(base_model=str(tiny_model), max_length=512, test_share=0.4)).finish()
        assert done.ok, done.message
        counts = members_of(store, done.name)["members"]
        man = json.loads(Registry(store).get(done.name).manifest_json)
    finally:
        store.close()
    assert {m: c["sessions"] for m, c in counts.items()} == {"alice": 3, "bob": 4}
    held = {u["id"] for u in man["sessions"] if u["split"] == "test"}
    assert sum(c["held_out"] for c in counts.values()) == len(held) > 0


def test_members_ship_scrubbed_sessions_idempotently_and_survive_a_dead_server(team, monkeypatch, tiny_model):
    server, tmp_path = team
    alice = _member(tmp_path, monkeypatch, server, "alice", range(3))
    done = team_member.push(alice)
    assert not done.problems, done.problems
    assert (done.spooled, done.sent_sessions, done.left_files, done.offline) == (3, 3, 0, False)
    bob = _member(tmp_path, monkeypatch, server, "bob", range(3, 5))
    assert team_member.push(bob).sent_sessions == 2
    assert server.status()["sessions_per_member"] == {"alice": 3, "bob": 2}
    sessions, messages = _server_rows(tmp_path)
    assert sorted(m for _, m in sessions) == ["alice"] * 3 + ["bob"] * 2
    assert messages and not any(SECRET in t or SECRET in p for t, p in messages)
    assert any("<SECRET:" in t for t, _ in messages)

    again = team_member.push(bob)  # nothing changed: nothing sent, nothing doubled
    assert (again.spooled, again.sent_files) == (0, 0)
    assert server.status()["sessions_per_member"] == {"alice": 3, "bob": 2}

    server.kill()
    folder = tmp_path / "bob-transcripts"
    for i in (5, 6):
        write_session(folder, i)
    ingest(bob, folder)
    offline = team_member.push(bob)
    assert offline.offline and offline.spooled == 2 and offline.left_files == 1
    server.start()
    drained = team_member.drain()
    assert (drained.sent_sessions, drained.left_files) == (2, 0)
    assert server.status()["sessions_per_member"] == {"alice": 3, "bob": 4}
    assert len(_server_rows(tmp_path)[0]) == 7
    _pooled_build_counts_each_member(tmp_path, monkeypatch, tiny_model)
    _as(monkeypatch, tmp_path, "bob")

    revoked = _cli(server.env, "team", "revoke", "bob")
    assert revoked.returncode == 0, revoked.stderr
    write_session(folder, 7)
    ingest(bob, folder)
    with pytest.raises(team_member.Refused):
        team_member.push(bob)
    assert len(team_member.pending()) == 1  # the spool is kept for a later invitation
    again = _cli(server.env, "team", "invite", "bob", "--json")  # invited again: a new token drains the spool
    team_member.join(server.url, json.loads(again.stdout)["token"])
    assert team_member.drain().sent_sessions == 1 and not team_member.pending()

    _as(monkeypatch, tmp_path, "alice")
    withdrawn, built = team_member.withdraw()
    assert withdrawn == 3 and len(built) == 1  # the pooled build above held alice's sessions, and says so
    assert server.status()["sessions_per_member"] == {"bob": 5}
    shown = _cli(server.env, "dataset", "show", built[0])
    assert "built with 3 session(s) no longer stored" in shown.stdout, shown.stdout + shown.stderr
    listed = _cli(server.env, "team", "members", "--json")
    assert [(m["name"], m["revoked_at"] is None) for m in json.loads(listed.stdout)] == [("alice", True),
                                                                                         ("bob", True)]
    alice.close()
    bob.close()
