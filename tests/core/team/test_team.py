"""Team mode end to end: a real server subprocess (`nightschool team serve`: the API and the team school's runtime),
two members' data dirs, spool, drain, a kill mid-upload, revoke, withdraw, a cycle on the pooled corpus reaching a
verdict, and the members-only status with the deployed student."""
from __future__ import annotations

import http.client
import json
import time
from pathlib import Path

import pytest

from app.core.base.store import Store
from app.core.team import member as team_member
from tests.core.datasets.helpers import ingest, write_session
from tests.core.runtime.daemon_helpers import wait_for
from tests.core.team.helpers import SECRET, Server, as_member, as_server, cli, join_member, server_rows


def _pooled_build_counts_each_member(server: Server, monkeypatch, tiny_model: Path) -> None:
    """The team school builds on the pooled corpus; what the cycle's report card shows per member are counts."""
    from app.core.datasets.catalog import Registry
    from app.core.datasets.config import BuildConfig
    from app.core.datasets.runs import start_build
    from app.core.runtime.school.stages import members_of

    as_server(monkeypatch, server)
    store = server.store()
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
          "judge_with": "transformers", "judge_examples": 8, "judge_contexts": 48, "free_served": "never", "port": 0,
          "hyper": {"learning_rate": 0.001, "batch_size": 2, "grad_accum": 1, "lora_r": 8, "lora_alpha": 16,
                    "warmup": 0.0, "save_steps": 2, "logging_steps": 1, "max_length": 512, "epochs": 100}}
CYCLE_S = 300.0  # build, 2 steps, two evaluations on the tiny model (about a minute on 2 busy cores)


def _a_cycle_on_the_pool_reaches_a_verdict(tmp_path: Path, monkeypatch, server: Server, tiny_model: Path) -> None:
    """The server's own runtime runs a cycle on the pooled corpus to the gate's verdict; members see it."""
    from app.core.judge.gate import Thresholds
    from app.core.judge.records import set_thresholds
    from app.core.runtime.school import cycles
    from app.core.runtime.school.facade import School

    as_server(monkeypatch, server)
    store = server.store()
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


def _no_holder(monkeypatch, server: Server) -> bool:
    from app.core.runtime.machinery import lock

    as_server(monkeypatch, server)
    return lock.holder() is None


def _killed_mid_upload_stores_each_session_once(server: Server, tmp_path: Path, bob: Store) -> None:
    """The server dies (SIGKILL) while an outbox file is half sent; after its restart a drain stores every session of
    that file exactly once (one changed, two new), none lost."""
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
    sessions, messages = server_rows(server)
    assert len(sessions) == len({sid for sid, _ in sessions}) == 7  # every session once, by its key
    assert any("(edited later)" in t for t, _ in messages)


def test_members_ship_scrubbed_sessions_idempotently_and_survive_a_dead_server(team_pg, monkeypatch, tiny_model):
    server, tmp_path = team_pg  # the team school's store on PostgreSQL
    alice = join_member(tmp_path, monkeypatch, server, "alice", range(3))
    done = team_member.push(alice)
    assert not done.problems, done.problems
    assert (done.spooled, done.sent_sessions, done.left_files, done.offline) == (3, 3, 0, False)
    bob = join_member(tmp_path, monkeypatch, server, "bob", range(3, 5))
    assert team_member.push(bob).sent_sessions == 2
    assert server.status()["sessions_per_member"] == {"alice": 3, "bob": 2}
    sessions, messages = server_rows(server)
    assert sorted(m for _, m in sessions) == ["alice"] * 3 + ["bob"] * 2
    assert messages and not any(SECRET in t or SECRET in p for t, p in messages)
    assert any("<SECRET:" in t for t, _ in messages)

    again = team_member.push(bob)  # nothing changed: nothing sent, nothing doubled
    assert (again.spooled, again.sent_files) == (0, 0)
    assert server.status()["sessions_per_member"] == {"alice": 3, "bob": 2}

    _killed_mid_upload_stores_each_session_once(server, tmp_path, bob)
    _pooled_build_counts_each_member(server, monkeypatch, tiny_model)
    as_member(monkeypatch, tmp_path, "bob")

    revoked = cli(server.env, "team", "revoke", "bob")
    assert revoked.returncode == 0, revoked.stderr
    write_session(tmp_path / "bob-transcripts", 7)
    ingest(bob, tmp_path / "bob-transcripts")
    with pytest.raises(team_member.Refused):
        team_member.push(bob)
    assert len(team_member.pending()) == 1  # the spool is kept for a later invitation
    again = cli(server.env, "team", "invite", "bob", "--json")  # invited again: a new token drains the spool
    server.tokens["bob"] = json.loads(again.stdout)["token"]
    team_member.join(server.url, server.tokens["bob"])
    assert team_member.drain().sent_sessions == 1 and not team_member.pending()

    as_member(monkeypatch, tmp_path, "alice")
    withdrawn, built = team_member.withdraw()
    assert withdrawn == 3 and len(built) == 1  # the pooled build above held alice's sessions, and says so
    assert server.status()["sessions_per_member"] == {"bob": 5}
    shown = cli(server.env, "dataset", "show", built[0])
    assert "built with 3 session(s) no longer stored" in shown.stdout, shown.stdout + shown.stderr
    listed = cli(server.env, "team", "members", "--json")
    assert [(m["name"], m["revoked_at"] is None) for m in json.loads(listed.stdout)] == [("alice", True),
                                                                                         ("bob", True)]
    alice.close()
    bob.close()
    _a_cycle_on_the_pool_reaches_a_verdict(tmp_path, monkeypatch, server, tiny_model)
    assert server.stop() == 0  # SIGTERM stops the API and the school's runtime
    assert _no_holder(monkeypatch, server)
