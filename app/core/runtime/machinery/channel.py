"""The runtime's status channel: a Unix socket (0600) beside its lock; a viewer sends {"token"} first, then receives a
snapshot and every bus event as length-prefixed JSON frames (the engine socket's framing)."""
from __future__ import annotations

import json
import os
import secrets
import socket
import threading
from pathlib import Path
from typing import Callable, Iterator

from app.core.base import paths
from app.core.base.protocol import HEADER, MAX_FRAME
from app.core.runtime.machinery.bus import Bus, Kind

SOCKET = "status.sock"


def _send(sock: socket.socket, obj: dict) -> None:
    data = json.dumps(obj, default=str).encode()
    if len(data) > MAX_FRAME:
        data = json.dumps({"type": obj.get("type", "event"), "seq": obj.get("seq"), "truncated": True}).encode()
    sock.sendall(HEADER.pack(len(data)) + data)


def _recv(sock: socket.socket) -> dict | None:
    head = _exact(sock, HEADER.size)
    if head is None:
        return None
    (length,) = HEADER.unpack(head)
    if length > MAX_FRAME:
        return None
    body = _exact(sock, length)
    return None if body is None else json.loads(body)


def _exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


class StatusChannel:
    """Serves the bus to viewers with the token; one thread per viewer."""

    def __init__(self, bus: Bus, folder: Path, snapshot: Callable[[], dict]) -> None:
        self.bus, self.snapshot = bus, snapshot
        short = len(str(folder / SOCKET)) <= paths.MAX_SOCKET_PATH
        self.path = folder / SOCKET if short else paths.socket_path(folder, f"status-{os.getpid()}")
        self.token = secrets.token_urlsafe(24)
        self._server: socket.socket | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        self.path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            server.bind(str(self.path))
        finally:
            os.umask(old)
        server.listen(8)
        server.settimeout(0.5)
        self._server = server
        threading.Thread(target=self._accept, name="runtime-status", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.close()
        self.path.unlink(missing_ok=True)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="runtime-viewer", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                hello = _recv(conn)
            except (OSError, ValueError):
                return
            if not hello or not secrets.compare_digest(str(hello.get("token", "")), self.token):
                _send(conn, {"type": Kind.CHANNEL_REFUSED.value, "message": "wrong or missing token"})
                return
            conn.settimeout(None)
            seq = int(hello.get("since", 0) or 0)
            try:
                _send(conn, {"type": Kind.SNAPSHOT.value, **self.snapshot()})
                while not self._stop.is_set():
                    for event in self.bus.since(seq):
                        _send(conn, event)
                        seq = event["seq"]
                    with self.bus.changed:
                        self.bus.changed.wait(1.0)
            except OSError:
                return


def watch(path: str | Path, token: str, since: int = 0, timeout: float | None = None) -> Iterator[dict]:
    """A viewer's stream: the snapshot, then the runtime's events as they happen (ends when the runtime goes)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        _send(sock, {"token": token, "since": since})
        while (frame := _recv(sock)) is not None:
            yield frame


def snapshot(holder: dict, timeout: float = 5.0) -> dict | None:
    """The running runtime's snapshot, read from its channel (holder: its runtime.json); None when it cannot be
    reached."""
    try:
        for frame in watch(holder["channel"], holder.get("token", ""), timeout=timeout):
            return frame if frame.get("type") == "snapshot" else None
    except (OSError, ValueError, KeyError):
        return None
    return None
