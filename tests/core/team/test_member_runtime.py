"""A member's runtime ships by itself (a real Runtime in process, a real team server subprocess): after capture,
again on the timer while the server is away, once refused until it joins again; and the MCP tools answer for the team
school (the server's `status`, a member's `team_status`) through the SDK's client."""
from __future__ import annotations

import json
from pathlib import Path

from app.core.base.store import Store
from app.core.team import member as team_member
from tests.core.datasets.helpers import write_session
from tests.core.runtime.daemon_helpers import wait_for
from tests.core.team.helpers import as_member, as_server, cli, join_member

CAPTURED_S = 60.0  # capture is seen by watchdog at once, else by the 30 s sweep (a loaded machine's inotify)


def test_a_members_runtime_ships_by_itself_retries_while_the_server_is_away_and_stops_on_a_refusal(team,
                                                                                                   monkeypatch):
    from app.core.capture.sources import CaptureConfig
    from app.core.runtime.machinery.bus import Kind
    from app.core.runtime.supervisor import Runtime

    server, tmp_path = team
    carol = join_member(tmp_path, monkeypatch, server, "carol", range(0))
    root = tmp_path / "carol-agent"
    project = root / "-home-me-proj"
    project.mkdir(parents=True)
    runtime = Runtime(role="daemon", store=carol, keeper=False, team_retry_s=0.3,
                      capture_config=CaptureConfig(roots={"claude-code": [str(root)]}))
    events: list[dict] = []
    runtime.bus.subscribe(events.append)
    runtime.start()
    shipped = lambda n: lambda: server.status("carol")["sessions_per_member"].get("carol") == n
    of = lambda kind: [e for e in events if e["type"] == kind]
    try:
        for i in (0, 1):
            write_session(project, i)
        wait_for(shipped(2), CAPTURED_S, "carol's captured sessions on the server", every=0.1)
        # the server stores before it answers, and the push is published after the answer: wait for the event too
        wait_for(lambda: sum(e["sent_sessions"] for e in of(Kind.TEAM_PUSHED)) == 2, CAPTURED_S, "the push event",
                 every=0.1)

        server.kill()  # away: the capture goes on, the push waits in the outbox and is tried on the timer
        write_session(project, 2)
        wait_for(lambda: any(e["offline"] for e in of(Kind.TEAM_PUSHED)), CAPTURED_S, "an offline push", every=0.1)
        assert team_member.pending()
        server.start()
        wait_for(shipped(3), CAPTURED_S, "the retry after the server came back", every=0.1)
        _mcp_answers_for_the_team(server, tmp_path, monkeypatch, carol)

        _refused_until_joined_again(server, project, of)
    finally:
        runtime.stop()
        carol.close()


def _refused_until_joined_again(server, project: Path, of) -> None:
    """A revoked token: one notification with what / why / fix, no tries until `team join` with a new token."""
    from app.core.runtime.machinery.bus import Kind

    assert cli(server.env, "team", "revoke", "carol").returncode == 0
    write_session(project, 3)
    refused = wait_for(lambda: of(Kind.TEAM_REFUSED), CAPTURED_S, "the refusal's notification", every=0.1)[0]
    assert refused["what"] and refused["why"] and "nightschool team join" in refused["fix"]
    again = json.loads(cli(server.env, "team", "invite", "carol", "--json").stdout)["token"]
    team_member.join(server.url, again)  # joined again: the runtime notices and ships what waited
    server.tokens["carol"] = again
    wait_for(lambda: server.status("carol")["sessions_per_member"].get("carol") == 4, CAPTURED_S,
             "the spool after joining again", every=0.1)
    wait_for(lambda: not team_member.pending(), CAPTURED_S, "the outbox file deleted after the server's answer",
             every=0.1)
    assert len(of(Kind.TEAM_REFUSED)) == 1  # said once, not retried meanwhile


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


def _mcp_answers_for_the_team(server, tmp_path: Path, monkeypatch, carol: Store) -> None:
    """The MCP tools through the SDK's client: on the server's data dir `status` reads the pooled store; on a
    member's, `team_status` is the team school as the server answers it (and refused where no team was joined)."""
    from mcp import Client

    from app.mcp.server import build_server

    pooled = server.store()
    answers: dict[str, object] = {}

    async def ask(store: Store, tool: str, key: str) -> None:
        async with Client(build_server(store)) as client:
            answers[key] = await client.call_tool(tool, {})

    try:
        as_server(monkeypatch, server)
        _run_async(lambda: ask(pooled, "status", "server"))
        _run_async(lambda: ask(pooled, "team_status", "not a member"))
        as_member(monkeypatch, tmp_path, "carol")
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
