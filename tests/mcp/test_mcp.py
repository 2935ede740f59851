"""The MCP server through the SDK's own clients: `nightschool mcp` over stdio in a subprocess, `nightschool mcp --http`
behind its bearer token in a subprocess, and the tools' errors and commands in process."""
from __future__ import annotations

import os
import queue
import re
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.core.datasets.helpers import ingest, write_session

REPO = Path(__file__).resolve().parents[2]
TOOLS = {"status", "history", "checkpoints", "evaluate", "run_cycle_now", "approve_deployment", "refuse_deployment",
         "ask_student", "mark_session", "experience_feedback", "experience_summary", "team_status", "blind_results"}
DEADLINE_S = 60.0



def run_async(fn) -> None:
    """anyio.run(fn) on a thread of its own: a Qt test earlier in the same process can leave its qasync loop marked
    as running on the main thread, where asyncio refuses to start another."""
    import threading

    failed: list[BaseException] = []

    def body() -> None:
        try:
            anyio.run(fn)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            failed.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]

def _text(result) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


def test_stdio_lists_the_tools_starts_a_cycle_and_status_shows_it(ns_home, store, tmp_path):
    params = StdioServerParameters(command=sys.executable, args=["-m", "app.cli.main", "mcp"], cwd=str(REPO),
                                   env={"NIGHTSCHOOL_HOME": str(ns_home)})

    async def go() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with Client(params) as client:
                listed = await client.list_tools()
                assert {t.name for t in listed.tools} == TOOLS
                assert all(t.description and t.output_schema for t in listed.tools)

                before = await client.call_tool("status", {})
                assert not before.is_error, _text(before)
                status = before.structured_content
                assert status["policy"]["deploy"] in ("auto", "ask", "never")
                assert isinstance(status["next"]["needed"], int)
                assert status["student"]["deployed_label"] == "base"
                assert status["cycle"] is None and status["runtime"] is None

                refused = await client.call_tool("run_cycle_now", {})  # nothing captured: nothing to learn
                assert refused.is_error and "nothing new to learn" in _text(refused), _text(refused)
                assert (await client.call_tool("status", {})).structured_content["cycle"] is None

                write_session(tmp_path / "agent", 0)
                ingest(store, tmp_path / "agent")
                started = await client.call_tool("run_cycle_now", {})
                assert not started.is_error, _text(started)
                cycle_id = started.structured_content["cycle"]
                assert isinstance(cycle_id, int) and started.structured_content["created"] is True

                after = (await client.call_tool("status", {})).structured_content
                assert after["cycle"]["id"] == cycle_id
                assert after["cycle"]["state"] == "running"
                history = (await client.call_tool("history", {"limit": 5})).structured_content
                assert [c["id"] for c in history["cycles"]] == [cycle_id]

    run_async(go)


class HttpServer:
    """`nightschool mcp --http --port 0` in a subprocess; its stderr is read on a thread (the URL comes from it)."""

    def __init__(self, home: Path) -> None:
        env = {**os.environ, "NIGHTSCHOOL_HOME": str(home)}
        self.proc = subprocess.Popen([sys.executable, "-m", "app.cli.main", "mcp", "--http", "--port", "0"], cwd=REPO,
                                     env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put("")  # EOF: the process ended

    def url(self) -> str:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=deadline - time.monotonic())
            except queue.Empty:
                break
            self.seen.append(line)
            found = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line)
            if found:
                return found.group(1)
            assert line, f"the server ended before it listened: {''.join(self.seen)}"
        raise AssertionError(f"no URL on stderr in {DEADLINE_S} s: {''.join(self.seen)}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _post(url: str, token: str | None) -> int:
    """The HTTP status of an initialize POST (with or without the bearer token)."""
    body = (b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
            b'"capabilities":{},"clientInfo":{"name":"test","version":"1"}}}')
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers, method="POST"), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _wait_until_answering(url: str) -> int:
    """Poll (with a deadline) until the server answers a request; returns that first status."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            return _post(url, None)
        except (urllib.error.URLError, ConnectionError) as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{url} did not answer in {DEADLINE_S} s: {exc}") from exc
            time.sleep(0.05)  # the poll's interval, under the deadline above


def test_http_refuses_requests_without_the_token_and_serves_the_sdk_client_with_it(ns_home):
    server = HttpServer(ns_home)
    try:
        url = server.url()
        assert _wait_until_answering(url) == 401
        assert _post(url, "not-the-token") == 401

        token_file = ns_home / "runtime" / "mcp_token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text(encoding="utf-8").strip()
        printed = subprocess.run([sys.executable, "-m", "app.cli.main", "mcp", "token"], cwd=REPO, check=True,
                                 env={**os.environ, "NIGHTSCHOOL_HOME": str(ns_home)}, capture_output=True, text=True)
        assert printed.stdout.strip() == token and len(token) >= 32

        async def go() -> None:
            with anyio.fail_after(DEADLINE_S):
                async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
                    async with Client(streamable_http_client(url, http_client=http)) as client:
                        listed = await client.list_tools()
                        assert {t.name for t in listed.tools} == TOOLS
                        status = await client.call_tool("status", {})
                        assert not status.is_error and status.structured_content["cycle"] is None

        run_async(go)
    finally:
        server.stop()


def test_http_listens_on_loopback_only(ns_home):
    from app.mcp.server import HttpError, run_http

    try:
        run_http(0, host="0.0.0.0")
    except HttpError as exc:
        assert "loopback only" in str(exc)
    else:
        raise AssertionError("run_http served on 0.0.0.0")


def test_a_refusal_comes_back_as_a_tool_error_with_its_reason(store, tmp_path):
    from app.core.runtime.school import cycles
    from app.mcp.server import build_server

    write_session(tmp_path / "agent", 0)
    ingest(store, tmp_path / "agent")

    async def go() -> None:
        async with Client(build_server(store)) as client:
            started = (await client.call_tool("run_cycle_now", {})).structured_content
            refused = await client.call_tool("approve_deployment", {"cycle_id": started["cycle"]})
            assert refused.is_error
            assert "is not waiting for approval" in _text(refused)
            assert "It is running at building" in _text(refused)  # the why travels too

            missing = await client.call_tool("mark_session", {"session_id": "nope", "good": True})
            assert missing.is_error and "no captured session 'nope'" in _text(missing)
            no_model = await client.call_tool("ask_student", {"question": "hello?"})
            assert no_model.is_error and "no model is served" in _text(no_model)

            cycles.update(store, started["cycle"], state="approval", stage="deploying")
            decided = await client.call_tool("refuse_deployment", {"cycle_id": started["cycle"]})
            assert not decided.is_error, _text(decided)
            assert decided.structured_content["inputs"]["approval"] == "refused"
            assert decided.structured_content["state"] == "running"  # the runtime takes the refusal up

    run_async(go)


def test_the_token_is_made_once_and_kept_private(ns_home):
    from app.mcp import access

    first = access.token()
    assert access.token() == first and access.matches(first) and not access.matches(first + "x")
    assert not access.matches("") and not access.matches(None)
    path = access.token_path()
    assert path == ns_home / "runtime" / "mcp_token"
    os.chmod(path, 0o644)
    assert access.token() == first and stat.S_IMODE(path.stat().st_mode) == 0o600
