"""The engine's socket: a per-job Unix socket (0600) that streams events to authenticated clients and takes commands.

Every event is numbered, appended to the run's events.jsonl and kept in memory, so a client that attaches
late (or re-attaches after a restart) gets the whole history replayed before the live stream.
"""
from __future__ import annotations

import hmac
import os
import socket
import threading
from pathlib import Path
from typing import Callable

from app.core.base import protocol as P

HELLO_TIMEOUT_S = 5.0


class Controls:
    """What clients asked for; read by the training callback between steps."""

    def __init__(self) -> None:
        self.resume_event = threading.Event()
        self.resume_event.set()
        self.stop_requested = threading.Event()
        self.checkpoint_requested = threading.Event()

    @property
    def paused(self) -> bool:
        return not self.resume_event.is_set()


class EngineServer:
    """Accepts clients on the job's socket, replays history, broadcasts events, dispatches commands."""

    def __init__(self, job_id: str, socket_path: Path, token: str, events_path: Path, kind: str = "sft") -> None:
        self.job_id, self.token, self.kind = job_id, token, kind
        self.socket_path = Path(socket_path)
        self.events_path = Path(events_path)
        self.controls = Controls()
        self.state = "starting"
        self._lock = threading.Lock()
        self._history: list[tuple[int, bytes]] = []  # (seq, frame)
        self._seq = self._load_history()
        self._clients: list[socket.socket] = []
        self._events = self.events_path.open("a", encoding="utf-8")
        self._listener: socket.socket | None = None
        self._closed = threading.Event()
        self.on_command: Callable[[P.Envelope], None] | None = None

    def _load_history(self) -> int:
        """A resumed job's engine continues the run's numbering: earlier events are replayed to clients, and a
        line torn by a crash is cut off so the next event starts on its own line. Returns the last seq."""
        if not self.events_path.is_file():
            return 0
        data = self.events_path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with self.events_path.open("r+b") as fh:
                fh.truncate(keep)
            data = data[:keep]
        last = 0
        for raw in data.splitlines():
            try:
                env = P.loads(raw)
            except P.ProtocolError:
                continue
            if env.seq and env.seq > last:
                last = env.seq
                self._history.append((env.seq, P.encode(env)))
        return last

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self.socket_path.exists():
            self.socket_path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket file is created 0600: only this user can connect
        try:
            sock.bind(str(self.socket_path))
        finally:
            os.umask(old)
        os.chmod(self.socket_path, 0o600)
        sock.listen(8)
        self._listener = sock
        threading.Thread(target=self._accept_loop, name="engine-accept", daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            for client in self._clients:
                _close_quietly(client)
            self._clients.clear()
            self._events.close()
        if self._listener:
            _close_quietly(self._listener)
        if self.socket_path.exists():
            self.socket_path.unlink()

    # --- events out --------------------------------------------------------------------------
    def emit(self, body: P.Body, reply_to: str | None = None) -> P.Envelope:
        """Number the event, append it to events.jsonl, keep it, and send it to every client."""
        if isinstance(body, P.State):
            self.state = body.state
        with self._lock:
            self._seq += 1
            env = P.make(body, job=self.job_id, seq=self._seq, reply_to=reply_to)
            line = P.dumps(env)
            if not self._events.closed:
                self._events.write(line + "\n")
                self._events.flush()
                if isinstance(body, (P.Result, P.Error, P.State)):
                    os.fsync(self._events.fileno())
            frame = P.encode(env)
            self._history.append((self._seq, frame))
            for client in list(self._clients):
                try:
                    client.sendall(frame)
                except OSError:
                    self._stop_sending(client)
        return env

    def _stop_sending(self, client: socket.socket) -> None:
        """A client that cannot take events gets no more; its reader thread still drains commands it sent."""
        if client in self._clients:
            self._clients.remove(client)
        try:
            client.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _drop(self, client: socket.socket) -> None:
        if client in self._clients:
            self._clients.remove(client)
        _close_quietly(client)

    # --- clients in --------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), name="engine-client", daemon=True).start()

    def _handshake(self, client: socket.socket) -> P.Envelope | None:
        client.settimeout(HELLO_TIMEOUT_S)
        try:
            hello = P.recv_frame(client)
        except (P.ProtocolError, OSError) as exc:
            self._refuse(client, f"bad hello: {exc}")
            return None
        if hello is None or hello.type != "hello":
            self._refuse(client, "the first message must be hello")
            return None
        if not hmac.compare_digest(str(hello.body.token), self.token):
            self._refuse(client, "wrong token")
            return None
        client.settimeout(None)
        return hello

    def _refuse(self, client: socket.socket, why: str) -> None:
        err = P.make(P.Error(message="connection refused", why=why,
                             fix="use the token recorded in the job's spec"), job=self.job_id)
        try:
            P.send_frame(client, err)
        except OSError:
            pass
        _close_quietly(client)

    def _serve(self, client: socket.socket) -> None:
        hello = self._handshake(client)
        if hello is None:
            return
        since = hello.body.since_seq
        with self._lock:
            try:
                P.send_frame(client, P.make(P.Hello(role="engine", pid=os.getpid(), kind=self.kind),
                                            job=self.job_id, seq=self._seq, reply_to=hello.id))
                for seq, frame in self._history:
                    if seq > since:
                        client.sendall(frame)
            except OSError:
                _close_quietly(client)
                return
            self._clients.append(client)
        self._read_commands(client)

    def _read_commands(self, client: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                env = P.recv_frame(client)
            except (P.ProtocolError, OSError):
                env = None
            if env is None:
                with self._lock:
                    self._drop(client)
                return
            self._dispatch(env)

    def _dispatch(self, env: P.Envelope) -> None:
        c = self.controls
        if env.type == "pause":
            c.resume_event.clear()
        elif env.type == "resume":
            c.resume_event.set()
        elif env.type == "stop":
            c.stop_requested.set()
            c.resume_event.set()  # a paused job must wake up to stop
        elif env.type == "checkpoint_now":
            c.checkpoint_requested.set()
        elif env.type == "ping":
            self.emit(P.Pong(state=self.state), reply_to=env.id)
            return
        else:
            self.emit(P.Log(level="warning", message=f"ignored unknown command {env.type!r}"))
            return
        self.emit(P.Ack(command=env.type), reply_to=env.id)
        if self.on_command:
            self.on_command(env)


def _close_quietly(sock: socket.socket) -> None:
    """Shut down, then close: shutdown wakes a thread blocked in recv() and sends the peer its EOF."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
