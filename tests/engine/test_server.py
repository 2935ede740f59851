"""EngineServer without training: a command sent by a client that hangs up at once is never lost."""
from __future__ import annotations

import asyncio
import threading

from app.core.base import protocol as P
from app.core.train.engine_client import EngineClient
from engine.train.jobsocket import EngineServer


def test_a_command_from_a_client_that_hangs_up_at_once_still_lands(tmp_path):
    server = EngineServer("job-1", tmp_path / "s.sock", "tok", tmp_path / "events.jsonl")
    server.start()
    done = threading.Event()

    def flood():  # events stream to the client while its command is on the way, as in a real job
        while not done.is_set():
            server.emit(P.Log(level="info", message="step"))

    threading.Thread(target=flood, daemon=True).start()

    async def fire_and_forget(command: str) -> None:
        client = EngineClient(server.socket_path, "tok", "job-1")
        await client.connect(since_seq=10**9)
        await client.send(command)
        await client.close()  # hang up without reading the events queued for us

    try:
        for _ in range(30):
            asyncio.run(fire_and_forget("pause"))
            assert _eventually(lambda: server.controls.paused), "a pause was lost"
            asyncio.run(fire_and_forget("resume"))
            assert _eventually(lambda: not server.controls.paused), "a resume was lost"
    finally:
        done.set()
        server.close()


def test_command_waits_for_the_engines_ack(tmp_path):
    server = EngineServer("job-1", tmp_path / "s.sock", "tok", tmp_path / "events.jsonl")
    server.start()

    async def go():
        client = EngineClient(server.socket_path, "tok", "job-1")
        await client.connect()
        try:
            return await client.command("checkpoint_now")
        finally:
            await client.close()

    try:
        ack = asyncio.run(go())
    finally:
        server.close()
    assert ack.type == "ack" and ack.body.command == "checkpoint_now"
    assert server.controls.checkpoint_requested.is_set()


def _eventually(cond, timeout: float = 5.0) -> bool:
    done = threading.Event()
    deadline = threading.Timer(timeout, done.set)
    deadline.start()
    try:
        while not done.is_set():
            if cond():
                return True
            done.wait(0.01)
        return cond()
    finally:
        deadline.cancel()
