"""Asyncio client for an engine's socket, and a follower that replays a run's history then streams it live."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Callable

from app.core.base import protocol as P
from app.core.train.events import read_events

CONNECT_TIMEOUT_S = 60.0
RECONNECT_S = 10.0  # per connection attempt while following
TAIL_POLL_S = 0.25  # how often the events file is re-read when the socket is unreachable
EventSink = Callable[[P.Envelope], None]


class EngineClient:
    """One connection to one engine: hello with the token, then frames in and commands out."""

    def __init__(self, socket_path: str | Path, token: str, job_id: str) -> None:
        self.socket_path, self.token, self.job_id = str(socket_path), token, job_id
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self, since_seq: int = 0, timeout: float = CONNECT_TIMEOUT_S,
                      alive: Callable[[], bool] = lambda: True) -> P.Envelope:
        """Connect (retrying while the engine boots) and handshake; return the engine's hello."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                self.reader, self.writer = await asyncio.open_unix_connection(self.socket_path,
                                                                              limit=P.MAX_FRAME + 16)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if not alive() or asyncio.get_running_loop().time() > deadline:
                    raise ConnectionError(f"the engine for job {self.job_id} is not listening on {self.socket_path}")
                await asyncio.sleep(0.1)
        await P.write_frame(self.writer, P.make(P.Hello(token=self.token, since_seq=since_seq), job=self.job_id))
        reply = await P.read_frame(self.reader)
        if reply is None or reply.type == "error":
            why = reply.body.why if reply is not None else "the engine closed the connection"
            await self.close()
            raise P.AuthError(f"the engine refused the connection: {why}")
        return reply

    async def next_event(self) -> P.Envelope | None:
        return await P.read_frame(self.reader)

    async def send(self, command: str) -> None:
        if command not in P.COMMANDS:
            raise ValueError(f"unknown command {command!r}")
        await P.write_frame(self.writer, P.make(P.REGISTRY[command](), job=self.job_id))

    async def command(self, command: str, timeout: float = 30.0) -> P.Envelope:
        """Send a command and wait for the engine's ack (events that arrive first are skipped)."""
        if command not in P.COMMANDS:
            raise ValueError(f"unknown command {command!r}")
        env = P.make(P.REGISTRY[command](), job=self.job_id)
        await P.write_frame(self.writer, env)

        async def ack() -> P.Envelope:
            while True:
                reply = await P.read_frame(self.reader)
                if reply is None:
                    raise ConnectionError(f"the engine for job {self.job_id} closed before confirming {command}")
                if reply.reply_to == env.id:
                    return reply

        try:
            return await asyncio.wait_for(ack(), timeout)
        except asyncio.TimeoutError:
            raise ConnectionError(f"the engine for job {self.job_id} did not confirm {command} "
                                  f"within {timeout:.0f} s") from None

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except (ConnectionError, OSError):
                pass
            self.writer = None


class Follower:
    """Delivers a run's whole history once, in order, then its live events; survives the engine ending.

    client None: there is no socket to follow (a remote job: its events reach the file by log tailing), the file is
    tailed. waiting: while it returns a sentence, the engine is not running yet (the job is queued, or its cluster has
    not started it): the sentence goes to the sink once per change, as a log event without a seq (it is no engine
    event), and the file is tailed instead of connecting."""

    def __init__(self, events_path: Path, client: EngineClient | None, sink: EventSink,
                 alive: Callable[[], bool], waiting: Callable[[], str | None] | None = None) -> None:
        self.events_path, self.client, self.sink, self.alive = Path(events_path), client, sink, alive
        self.waiting = waiting or (lambda: None)
        self.last_seq = 0
        self.connected = False
        self.last_error = ""
        self.told = ""  # the waiting sentence last delivered

    def _deliver(self, env: P.Envelope) -> None:
        if env.seq is not None:
            if env.seq <= self.last_seq:
                return
            self.last_seq = env.seq
        self.sink(env)

    def _catch_up_from_disk(self) -> None:
        for env in read_events(self.events_path, self.last_seq):
            self._deliver(env)

    def _waits(self) -> bool:
        """Whether the engine is not running yet; says what it waits for when that changed."""
        words = self.waiting() or ""
        if words and words != self.told:
            self.sink(P.make(P.Log(message=words)))
        self.told = words
        return bool(words)

    async def run(self) -> None:
        """Replay from disk, stream from the socket while the engine lives, then drain the file again.

        If the socket cannot be reached while the engine runs, the events file is tailed instead (it is the
        ground truth) and the connection is retried. While the job waits, or has no socket here, the file is tailed.
        """
        self._catch_up_from_disk()
        while self.alive():
            if self._waits() or self.client is None:
                self._catch_up_from_disk()
                await asyncio.sleep(TAIL_POLL_S)
                continue
            try:
                await self.client.connect(since_seq=self.last_seq, alive=self.alive, timeout=RECONNECT_S)
                self.connected = True
                while (env := await self.client.next_event()) is not None:
                    self._deliver(env)
            except (ConnectionError, OSError, P.ProtocolError) as exc:
                self.last_error = str(exc)
            finally:
                self.connected = False
                await self.client.close()
            self._catch_up_from_disk()
            if self.alive():
                await asyncio.sleep(TAIL_POLL_S)
        self._catch_up_from_disk()

    async def send(self, command: str) -> bool:
        if not self.connected:
            return False
        await self.client.send(command)
        return True
