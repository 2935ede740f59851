"""The running window's door: the tray process asks an open window to come to the front (a QLocalServer beside the
runtime lock of its data dir, readable by the user only) instead of starting a second window."""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from app.core.base import paths
from app.core.runtime.machinery import lock

OPEN = b"open\n"
WAIT_MS = 500  # a local connect and write: a live window answers at once


def door_name() -> str:
    """runtime/window.sock in the data dir; where that path is too long for a Unix socket, a short name naming this
    user and data dir (Qt puts it in the temp dir)."""
    path = lock.runtime_dir() / "window.sock"
    if len(str(path)) <= paths.MAX_SOCKET_PATH:
        return str(path)
    digest = hashlib.sha256(str(paths.data_dir().resolve()).encode()).hexdigest()[:16]
    return f"nightschool-window-{os.getuid()}-{digest}"


def _connect(name: str) -> QLocalSocket | None:
    sock = QLocalSocket()
    sock.connectToServer(name)
    if not sock.waitForConnected(WAIT_MS):
        return None
    return sock


def knock() -> bool:
    """Ask the window of this data dir to show itself; False when no window answers."""
    sock = _connect(door_name())
    if sock is None:
        return False
    sock.write(OPEN)
    sent = sock.waitForBytesWritten(WAIT_MS)
    sock.disconnectFromServer()
    return sent


class WindowDoor(QObject):
    """Listens while the window lives; `on_open` runs on the GUI thread for each knock. `listening` is False when
    another window of this data dir already has the door (the tray opens that one)."""

    def __init__(self, on_open: Callable[[], None], parent=None) -> None:
        super().__init__(parent)
        self.on_open = on_open
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        self.server.newConnection.connect(self._accept)
        name = door_name()
        self.listening = False
        if _connect(name) is None:  # no live window answers (a crashed one's socket file is taken over)
            QLocalServer.removeServer(name)
            self.listening = self.server.listen(name)

    def _accept(self) -> None:
        while (conn := self.server.nextPendingConnection()) is not None:
            conn.readyRead.connect(lambda c=conn: self._read(c))
            conn.disconnected.connect(conn.deleteLater)
            if conn.bytesAvailable():
                self._read(conn)

    def _read(self, conn: QLocalSocket) -> None:
        if bytes(conn.readAll().data()).startswith(OPEN.strip()):
            self.on_open()

    def close(self) -> None:
        self.server.close()
