"""Blocking control of a running engine: one command over its socket (hello, command, ack), or ending its process."""
from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path
from typing import Callable

import psutil

from app.core.base import procs, protocol as P
from app.core.base.errors import Explained
from app.core.base.schema import Run

COMMAND_TIMEOUT_S = 15.0  # connect (the engine may still be booting) + hello + ack
TERM_GRACE_S = 10.0  # after SIGTERM, before SIGKILL
SKIP_REPLAY = 10**12  # since_seq in the hello: no history, only the ack


class EngineUnreachable(Explained, ConnectionError):
    """The engine could not be reached or did not confirm; the message says what to do."""


def send_command(socket_path: str | Path, token: str, job_id: str, command: str,
                 timeout: float = COMMAND_TIMEOUT_S, alive: Callable[[], bool] = lambda: True) -> P.Envelope:
    """Send one command to a job's engine and return its ack (events that arrive first are skipped)."""
    if command not in P.COMMANDS:
        raise ValueError(f"unknown command {command!r}")
    deadline = time.monotonic() + timeout
    sock = _connect(str(socket_path), job_id, deadline, alive)
    try:
        _hello(sock, token, job_id, deadline)
        env = P.make(P.REGISTRY[command](), job=job_id)
        P.send_frame(sock, env)
        return _await_reply(sock, env.id, job_id, command, deadline)
    except socket.timeout:
        raise EngineUnreachable(f"the engine for job {job_id} did not confirm {command} within {timeout:.0f} s; "
                                "it may be busy saving: try again, or `nightschool queue list`") from None
    except (OSError, P.ProtocolError) as exc:
        raise EngineUnreachable(f"the connection to the engine for job {job_id} broke ({exc}); "
                                "it may have just ended: `nightschool queue list`") from None
    finally:
        sock.close()


def _connect(path: str, job_id: str, deadline: float, alive: Callable[[], bool]) -> socket.socket:
    """Connect, retrying while the engine boots (its socket comes up within a second of the launch)."""
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.1))
            sock.connect(path)
            return sock
        except (FileNotFoundError, ConnectionRefusedError, socket.timeout):
            sock.close()
            if not alive() or time.monotonic() > deadline:
                raise EngineUnreachable(f"the engine for job {job_id} is not listening on {path}: it is not "
                                        "running (any more). See `nightschool queue list`") from None
            time.sleep(0.1)


def _hello(sock: socket.socket, token: str, job_id: str, deadline: float) -> None:
    P.send_frame(sock, P.make(P.Hello(token=token, since_seq=SKIP_REPLAY), job=job_id))
    sock.settimeout(max(deadline - time.monotonic(), 0.1))
    reply = P.recv_frame(sock)
    if reply is None or reply.type == "error":
        why = reply.body.why if reply is not None else "it closed the connection"
        raise EngineUnreachable(f"the engine for job {job_id} refused the connection: {why}")


def _await_reply(sock: socket.socket, env_id: str, job_id: str, command: str, deadline: float) -> P.Envelope:
    while True:
        sock.settimeout(max(deadline - time.monotonic(), 0.1))
        reply = P.recv_frame(sock)
        if reply is None:
            raise EngineUnreachable(f"the engine for job {job_id} closed before confirming {command}; "
                                    "it may have just ended: `nightschool queue list`")
        if reply.reply_to == env_id:
            return reply
        if time.monotonic() > deadline:
            raise socket.timeout()


# --- ending a process group --------------------------------------------------------------------
def engine_process(run: Run) -> psutil.Process | None:
    """The run's engine process if it still runs (the start time guards against a reused pid)."""
    return None if run is None else procs.live_process(run.pid, run.pid_started)


def terminate(run: Run, grace: float = TERM_GRACE_S) -> int | None:
    """SIGTERM the engine's process group (it leads its own session), SIGKILL after `grace`; the exit code."""
    proc = engine_process(run)
    if proc is None:
        return None
    _signal_group(run.pid, signal.SIGTERM)
    try:
        return proc.wait(grace)
    except psutil.TimeoutExpired:
        _signal_group(run.pid, signal.SIGKILL)
        try:
            return proc.wait(grace)
        except psutil.TimeoutExpired:
            return None


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(pid, sig)
