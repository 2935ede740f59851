"""Team mode end to end: a real server subprocess (`nightschool team serve`: the API and the team school's runtime),
members' data dirs, spool, drain, a kill mid-upload, revoke, withdraw, a cycle on the pooled corpus, the members-only
status, and a member's runtime that ships by itself."""
from __future__ import annotations

import http.client
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

import pytest
from sqlalchemy import select

from app.core.base.paths import CODE_ROOT
from app.core.base.schema import AgentSession, MessageRow
from app.core.base.store import Store
from app.core.team import member as team_member
from tests.core.datasets.helpers import ingest, write_session
from tests.core.runtime.daemon_helpers import wait_for

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

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


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
    if sessions:
        ingest(store, folder)
    invited = _cli(server.env, "team", "invite", name, "--json")
    assert invited.returncode == 0, invited.stderr
    server.tokens[name] = json.loads(invited.stdout)["token"]
    team_member.join(server.url, server.tokens[name])
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


def _half_upload_then_kill(server: Server, path: Path, token: str) -> None:
    """POST an outbox file, send half its body, then SIGKILL the server while the request is in flight."""
    body = path.read_bytes()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.putrequest("POST", "/v1/sessions")
    for name, value in {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                        "Content-Length": str(len(body))}.items():
        conn.putheader(name, value)
    conn.endheaders()
    conn.send(body[: len(body) // 2])
    server.kill()
    with pytest.raises((OSError, http.client.HTTPException)):
        conn.getresponse()
    conn.close()


POLICY = {"min_sessions": 1000, "window": "any", "cooldown_min": 0, "deploy": "never", "refine_every": 0,
          "max_load": 1000, "max_steps": 2, "max_length": 512, "near_duplicate": 0.0, "test_share": 0.4,
          "judge_with": "transformers", "judge_examples": 8, "free_served": "never", "port": 0,
          "hyper": {"learning_rate": 0.001, "batch_size": 2, "grad_accum": 1, "lora_r": 8, "lora_alpha": 16,
                    "warmup": 0.0, "save_steps": 2, "logging_steps": 1, "max_length": 512, "epochs": 100}}
CYCLE_S = 300.0  # build, 2 steps, two evaluations on the tiny model (about a minute on 2 busy cores)


def _a_cycle_on_the_pool_reaches_a_verdict(tmp_path: Path, monkeypatch, server: Server, tiny_model: Path) -> None:
    """The server's own runtime runs a cycle on the pooled corpus to the gate's verdict; members see it."""
    from app.core.judge.gate import Thresholds
    from app.core.judge.records import set_thresholds
    from app.core.runtime.school import cycles
    from app.core.runtime.school.facade import School

    _as(monkeypatch, tmp_path, "server")
    store = Store()
    try:
        school = School(store)
        for key, value in {**POLICY, "base_model": str(tiny_model)}.items():
            school.set_policy(key, value)
        set_thresholds(store, Thresholds(min_examples=2, min_contexts=5))
        started = school.now(by="test")
        assert started["runtime"], started  # the team server's runtime holds the data dir and takes it up
        began = time.monotonic()
        done = wait_for(lambda: (c := cycles.get(store, started["cycle"])) and c.state in cycles.ENDED and c,
                        CYCLE_S, "the team cycle to end", alive=lambda: server.proc.poll() is None)
        print(f"the team cycle took {time.monotonic() - began:.0f} s ({done.state}, {done.report.get('verdict')})")
    finally:
        store.close()
    assert done.report and done.report.get("verdict") in ("pass", "fail", "inconclusive"), (
        done.state, done.reason, done.outputs)
    status = server.status("bob")
    assert status["last_verdict"]["cycle"] == done.id
    assert status["last_verdict"]["verdict"] == done.report["verdict"]
    assert set(status["deployed"]) == {"model", "checkpoint_id", "since", "action", "verdict"}
    assert status["deployed"]["model"] == str(tiny_model) and status["deployed"]["checkpoint_id"] is None
    assert {"school", "sessions_per_member", "members"} <= set(status)  # the keys it always had


def _no_holder(monkeypatch, tmp_path: Path) -> bool:
    from app.core.runtime.machinery import lock

    _as(monkeypatch, tmp_path, "server")
    return lock.holder() is None


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

    # Killed mid-upload: the server dies (SIGKILL) while an outbox file is half sent; nothing is lost or doubled.
    folder = tmp_path / "bob-transcripts"
    write_session(folder, 3, extra_user=" (edited later)")  # a shipped session changed: it travels again
    for i in (5, 6):
        write_session(folder, i)
    ingest(bob, folder)
    assert team_member.spool(bob) == 3 and len(team_member.pending()) == 1
    _half_upload_then_kill(server, team_member.pending()[0], server.tokens["bob"])
    offline = team_member.drain()
    assert offline.offline and offline.left_files == 1
    server.start()
    drained = team_member.drain()
    assert (drained.sent_sessions, drained.left_files) == (3, 0)
    assert server.status()["sessions_per_member"] == {"alice": 3, "bob": 4}
    sessions, messages = _server_rows(tmp_path)
    assert len(sessions) == len({sid for sid, _ in sessions}) == 7  # every session once, by its key
    assert any("(edited later)" in t for t, _ in messages)
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
    server.tokens["bob"] = json.loads(again.stdout)["token"]
    team_member.join(server.url, server.tokens["bob"])
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
    _a_cycle_on_the_pool_reaches_a_verdict(tmp_path, monkeypatch, server, tiny_model)
    assert server.stop() == 0  # SIGTERM stops the API and the school's runtime
    assert _no_holder(monkeypatch, tmp_path)


def test_a_members_runtime_ships_by_itself_retries_while_the_server_is_away_and_stops_on_a_refusal(team,
                                                                                                   monkeypatch):
    from app.core.capture.sources import CaptureConfig
    from app.core.runtime.machinery.bus import Kind
    from app.core.runtime.supervisor import Runtime

    server, tmp_path = team
    carol = _member(tmp_path, monkeypatch, server, "carol", range(0))
    root = tmp_path / "carol-agent"
    project = root / "-home-me-proj"
    project.mkdir(parents=True)
    runtime = Runtime(role="daemon", store=carol, keeper=False, team_retry_s=0.3,
                      capture_config=CaptureConfig(roots={"claude-code": [str(root)]}))
    events: list[dict] = []
    runtime.bus.subscribe(events.append)
    runtime.start()
    shipped = lambda n: lambda: server.status()["sessions_per_member"].get("carol") == n  # noqa: E731
    of = lambda kind: [e for e in events if e["type"] == kind]  # noqa: E731
    try:
        server.tokens["alice"] = server.tokens["carol"]  # status() asks with a member's token
        for i in (0, 1):
            write_session(project, i)
        wait_for(shipped(2), DEADLINE, "carol's captured sessions on the server", every=0.1)
        assert sum(e["sent_sessions"] for e in of(Kind.TEAM_PUSHED)) == 2

        server.kill()  # away: the capture goes on, the push waits in the outbox and is tried on the timer
        write_session(project, 2)
        wait_for(lambda: any(e["offline"] for e in of(Kind.TEAM_PUSHED)), DEADLINE, "an offline push", every=0.1)
        assert team_member.pending()
        server.start()
        wait_for(shipped(3), DEADLINE, "the retry after the server came back", every=0.1)
        _mcp_answers_for_the_team(tmp_path, monkeypatch, carol)

        assert _cli(server.env, "team", "revoke", "carol").returncode == 0
        write_session(project, 3)
        refused = wait_for(lambda: of(Kind.TEAM_REFUSED), DEADLINE, "the refusal's notification", every=0.1)[0]
        assert refused["what"] and refused["why"] and "nightschool team join" in refused["fix"]
        again = json.loads(_cli(server.env, "team", "invite", "carol", "--json").stdout)["token"]
        team_member.join(server.url, again)  # joined again: the runtime notices and ships what waited
        server.tokens["alice"] = again
        wait_for(shipped(4), DEADLINE, "the spool after joining again", every=0.1)
        assert len(of(Kind.TEAM_REFUSED)) == 1 and not team_member.pending()  # said once, not retried meanwhile
    finally:
        runtime.stop()
        carol.close()


def _run_async(fn) -> None:
    """anyio.run(fn) on a thread of its own (as tests/mcp/test_mcp.py does: a Qt test earlier in the process can
    leave its loop marked as running on the main thread)."""
    import threading

    import anyio

    failed: list[BaseException] = []
    thread = threading.Thread(target=lambda: _into(failed, lambda: anyio.run(fn)))
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


def _into(failed: list[BaseException], fn) -> None:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
        failed.append(exc)


def _mcp_answers_for_the_team(tmp_path: Path, monkeypatch, carol: Store) -> None:
    """The MCP tools through the SDK's client: on the server's data dir `status` reads the pooled store; on a
    member's, `team_status` is the team school as the server answers it (and refused where no team was joined)."""
    from mcp import Client

    from app.mcp.server import build_server

    pooled = Store(tmp_path / "server" / "nightschool.db")
    answers: dict[str, object] = {}

    async def ask(store: Store, tool: str, key: str) -> None:
        async with Client(build_server(store)) as client:
            answers[key] = await client.call_tool(tool, {})

    try:
        _as(monkeypatch, tmp_path, "server")
        _run_async(lambda: ask(pooled, "status", "server"))
        _run_async(lambda: ask(pooled, "team_status", "not a member"))
        _as(monkeypatch, tmp_path, "carol")
        _run_async(lambda: ask(carol, "team_status", "member"))
    finally:
        pooled.close()
    server_status, refused, member = answers["server"], answers["not a member"], answers["member"]
    assert not server_status.is_error and server_status.structured_content["next"]["new_sessions"] == 3
    assert server_status.structured_content["runtime"]["role"] == "team server"  # the server runs the school
    assert refused.is_error and "has not joined a team" in refused.content[0].text
    assert not member.is_error, member.content
    assert member.structured_content["sessions_per_member"] == {"carol": 3}
    assert set(member.structured_content["deployed"]) == {"model", "checkpoint_id", "since", "action", "verdict"}
