"""The app's side of the built-in model server: start it detached (it outlives the GUI), find it again from its state
file, ask its health and status, switch and roll back models, stop it, chat with it. Plain HTTP (urllib) on loopback
with the API key kept in `<data dir>/serve/api_key`."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from app.core.base import paths, procs
from app.core.base.files import atomic_write
from app.core.base.store import store_address
from app.core.capture.actors import SERVED_MODEL  # noqa: F401 - the one name /v1/models lists, whichever file serves
from app.core.ship.errors import ShipError

DEFAULT_PORT = 8765
START_TIMEOUT = 120.0


def serve_dir() -> Path:
    path = paths.data_dir() / "serve"
    path.mkdir(parents=True, exist_ok=True)
    return path


def api_key() -> str:
    """The server's key (made once, readable by this user only)."""
    path = serve_dir() / "api_key"
    if not path.is_file():
        atomic_write(path, secrets.token_urlsafe(24), mode=0o600)
    return path.read_text(encoding="utf-8").strip()


@dataclass
class Model:
    """A GGUF to serve: alias, file, its recorded sha256, quantization."""

    name: str
    path: str
    sha256: str
    quant: str = ""

    def payload(self) -> dict:
        return {"name": self.name, "path": self.path, "sha256": self.sha256, "quant": self.quant}


def state() -> dict | None:
    """What the running server last wrote (pid, url, current, standby); None when no server is running."""
    path = serve_dir() / "server.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not _alive(data.get("pid")):
        path.unlink(missing_ok=True)
        return None
    return data


def _alive(pid) -> bool:
    return procs.live_process(pid) is not None


def request(method: str, route: str, body: dict | None = None, key: str | None = "", timeout: float = 120.0,
            base: str | None = None) -> tuple[int, dict]:
    """(HTTP status, JSON body) of one call to the running server; key '' uses the stored key, None sends none."""
    if base is None:
        st = state()
        if st is None:
            raise ShipError("the model server is not running", fix="start it: nightschool serve")
        base = f"http://{st['host']}:{st['port']}"
    req = urllib.request.Request(base + route, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json"})
    if key is not None:
        req.add_header("Authorization", f"Bearer {key or api_key()}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {"detail": exc.reason}
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        raise ShipError("the model server does not answer", why=str(exc), fix="nightschool serve restarts it") from exc


def health() -> dict | None:
    try:
        code, body = request("GET", "/health", key=None, timeout=5)
    except ShipError:
        return None
    return body if code == 200 else None


def start(current: Model, standby: Model | None = None, port: int | None = None) -> dict:
    """Start the server detached (a new session: it survives the app) and wait until it serves."""
    if (st := state()) is not None:
        raise ShipError("the model server is already running", why=f"pid {st['pid']} at {st['url']}")
    api_key()
    cmd = [paths.engine_python(), "-m", "engine.serve.modelserver", "--state-dir", str(serve_dir()),
           "--db", store_address(),  # answers are recorded there while the experience buffer is on
           "--port", str(DEFAULT_PORT if port is None else port), "--model", current.path, "--name", current.name,
           "--sha256", current.sha256, "--quant", current.quant]
    if standby is not None:
        cmd += ["--standby", standby.path, "--standby-name", standby.name, "--standby-sha256", standby.sha256,
                "--standby-quant", standby.quant]
    log = serve_dir() / "server.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                cwd=paths.engine_cwd(), env=paths.child_env(), start_new_session=True)
    set_desired(True)
    return _wait_ready(proc, log)


def _wait_ready(proc: subprocess.Popen, log: Path) -> dict:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
            raise ShipError("the model server did not start", why=" ".join(tail)[-600:],
                            fix=f"see {log}; nothing else changed")
        if (st := state()) is not None and st.get("pid") == proc.pid and health() is not None:
            return st
        time.sleep(0.2)
    proc.terminate()
    raise ShipError("the model server did not start in time", fix=f"see {log}")


def stop(timeout: float = 30.0) -> bool:
    """Ask the server to stop (then terminate it); False when none was running."""
    set_desired(False)
    st = state()
    if st is None:
        return False
    try:
        request("POST", "/nightschool/shutdown", timeout=5)
    except ShipError:
        pass
    deadline = time.monotonic() + timeout
    while _alive(st["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(st["pid"]):
        os.kill(st["pid"], 15)
    (serve_dir() / "server.json").unlink(missing_ok=True)
    return True


def switch(model: Model) -> dict:
    """Serve `model`; the server loads and checks it first and keeps the old one serving when it fails."""
    code, body = request("POST", "/nightschool/switch", model.payload(), timeout=600)
    if code != 200:
        raise ShipError(f"the server refused {Path(model.path).name}", why=str(body.get("detail", body)),
                        fix="the previous model is still serving; export the checkpoint again")
    return body


def swap_back() -> dict:
    """Serve the previous model again (it is still loaded: instant)."""
    code, body = request("POST", "/nightschool/rollback")
    if code != 200:
        raise ShipError("the server has no previous model loaded", why=str(body.get("detail", body)))
    return body


def park() -> dict:
    """Free the served models' memory for a training job; the API answers 503 with Retry-After until unpark()."""
    code, body = request("POST", "/nightschool/park")
    if code != 200:
        raise ShipError("the server could not park its model", why=str(body.get("detail", body)))
    return body


def unpark() -> dict:
    """Load the parked models again (the same files, hash-checked)."""
    code, body = request("POST", "/nightschool/unpark", timeout=600)
    if code != 200:
        raise ShipError("the parked model could not be loaded again", why=str(body.get("detail", body)),
                        fix="deploy it again or roll back (nightschool rollback)")
    return body


def chat(messages: list[dict], max_tokens: int = 256, temperature: float = 0.0, key: str | None = "") -> dict:
    """One chat completion from the served model (OpenAI response)."""
    code, body = request("POST", "/v1/chat/completions", {"messages": messages, "max_tokens": max_tokens,
                                                          "temperature": temperature}, key=key)
    if code != 200:
        raise ShipError(f"the server answered {code}", why=str(body.get("detail", body)))
    return body


def desired() -> bool:
    """Whether the user left the server running (the app restarts it when it is not)."""
    try:
        return bool(json.loads((serve_dir() / "desired.json").read_text(encoding="utf-8")).get("running"))
    except (OSError, ValueError):
        return False


def set_desired(running: bool) -> None:
    path = serve_dir() / "desired.json"
    atomic_write(path, json.dumps({"running": running}))
