"""A member's side: join a server (URL + token kept like the teacher key), spool scrubbed sessions, drain the outbox."""
from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import keyring
from keyring.errors import KeyringError

from app.core.base.errors import Explained
from app.core.base.files import atomic_write
from app.core.base.paths import config_dir, data_dir
from app.core.base.store import Store
from app.core.experience.keys import keyring_usable
from app.core.team import wire

SERVICE = "nightschool-team"
ENV_TOKEN = "NIGHTSCHOOL_TEAM_TOKEN"
PER_FILE = 20  # sessions per outbox file


class TeamError(Explained, RuntimeError):
    """A team command that cannot be done."""


class Refused(TeamError):
    """The server refused the token (401): the spool is kept."""


@dataclass
class Pushed:
    spooled: int = 0  # sessions written to the outbox this time
    sent_files: int = 0
    sent_sessions: int = 0
    left_files: int = 0
    offline: bool = False
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def team_dir() -> Path:
    return data_dir() / "team"


def outbox() -> Path:
    return team_dir() / "outbox"


def _user() -> str:
    return "member:" + hashlib.sha256(str(data_dir().resolve()).encode()).hexdigest()[:12]


def _token_file() -> Path:
    return config_dir() / f"team-{_user()[7:]}.token"


def join(url: str, token: str) -> str:
    """Keep the server's URL (data dir) and the token (keyring, else a 0600 file in the config dir); returns where."""
    url, token = (url or "").strip().rstrip("/"), (token or "").strip()
    if not url.startswith(("http://", "https://")):
        raise TeamError(f"{url!r} is not a server address", fix="pass the URL the team's server gave, e.g. "
                        "https://school.example.org")
    if not token:
        raise TeamError("the token is empty", fix="paste the token `nightschool team invite` printed on the server")
    atomic_write(team_dir() / "server.json", json.dumps({"url": url}), mode=0o600)
    if keyring_usable():
        try:
            keyring.set_password(SERVICE, _user(), token)
            return "keyring"
        except KeyringError:
            pass
    path = _token_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, token + "\n", mode=0o600)
    return f"file:{path}"


def joined() -> tuple[str, str]:
    """The server URL and token; refused when this data dir has not joined a team."""
    try:
        url = json.loads((team_dir() / "server.json").read_text())["url"]
    except (OSError, ValueError, KeyError):
        raise TeamError("this data dir has not joined a team", fix="run: nightschool team join URL") from None
    token = os.environ.get(ENV_TOKEN, "").strip() or _stored_token()
    if not token:
        raise TeamError("no team token is kept", fix="run `nightschool team join URL` again with the token")
    return url, token


def _stored_token() -> str:
    if keyring_usable():
        try:
            found = keyring.get_password(SERVICE, _user())
            if found:
                return found
        except KeyringError:
            pass
    path = _token_file()
    return path.read_text(encoding="utf-8").strip() if path.is_file() else ""


def _shipped_path() -> Path:
    return team_dir() / "shipped.json"


def _shipped() -> dict[str, str]:
    try:
        return json.loads(_shipped_path().read_text())
    except (OSError, ValueError):
        return {}


def spool(store: Store) -> int:
    """Write every session not yet spooled (or changed since: its content sha) to the outbox; returns how many."""
    shipped, batch, count = _shipped(), [], 0
    for key in wire.roots(store):
        one = wire.payload(store, key)
        if one is None or shipped.get(key) == one["sha256"]:
            continue
        batch.append(one)
        if len(batch) >= PER_FILE:
            count += _write_batch(batch, shipped)
            batch = []
    if batch:
        count += _write_batch(batch, shipped)
    return count


def _write_batch(batch: list[dict], shipped: dict[str, str]) -> int:
    name = f"{time.time_ns():020d}-{os.getpid()}.json.gz"
    atomic_write(outbox() / name, wire.encode(batch), mode=0o600)
    shipped.update({p["key"]: p["sha256"] for p in batch})  # spooled counts as shipped: the outbox delivers it
    atomic_write(_shipped_path(), json.dumps(shipped, sort_keys=True))
    return len(batch)


def pending() -> list[Path]:
    """Outbox files, oldest first."""
    return sorted(outbox().glob("*.json.gz")) if outbox().is_dir() else []


def drain(url: str | None = None, token: str | None = None, timeout: float = 30.0) -> Pushed:
    """Send the outbox oldest first; a file is deleted only after a 2xx. Offline: the files stay (offline=True).
    A 401 raises Refused with the files kept."""
    if url is None or token is None:
        url, token = joined()
    done = Pushed()
    files = pending()
    for i, path in enumerate(files):
        request = urllib.request.Request(f"{url}/v1/sessions", data=path.read_bytes(), method="POST", headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json", "Content-Encoding": "identity"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                raise Refused("the team's server refused this member's token", why=_detail(exc),
                              fix="ask the server's keeper for a new invitation, then run `nightschool team join`; "
                                  f"the {len(files) - i} unsent outbox file(s) are kept") from None
            done.problems.append(f"{path.name}: HTTP {exc.code} {_detail(exc)}")
            continue
        except (urllib.error.URLError, OSError):
            done.offline = True
            break
        path.unlink(missing_ok=True)
        done.sent_files += 1
        done.sent_sessions += int(answer.get("payloads", 0))
    done.left_files = len(pending())
    return done


def _detail(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("detail", ""))
    except (ValueError, OSError, AttributeError):
        return ""


def push(store: Store) -> Pushed:
    """Spool what is new, then drain."""
    url, token = joined()
    spooled = spool(store)
    done = drain(url, token)
    done.spooled = spooled
    return done


def is_member() -> bool:
    """Whether this data dir has joined a team (its server's URL is kept; the token may still be missing)."""
    return (team_dir() / "server.json").is_file()


def team_status(timeout: float = 5.0) -> dict:
    """The team school's status as its server answers GET /v1/status (with this member's token): refused when this
    data dir has not joined, unreachable with the reason, 401 as Refused."""
    url, token = joined()
    request = urllib.request.Request(f"{url}/v1/status", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            raise Refused("the team's server refused this member's token", why=_detail(exc),
                          fix="ask the server's keeper for a new invitation, then run `nightschool team join`") from None
        raise TeamError(f"the team's server answered HTTP {exc.code}", why=_detail(exc)) from None
    except (urllib.error.URLError, OSError) as exc:
        raise TeamError("the team's server cannot be reached", why=str(exc),
                        fix="the member's sessions stay spooled; try again when it is up") from None


def withdraw() -> tuple[int, list[str]]:
    """Ask the server to delete this member's sessions: how many it deleted, and the datasets already built with them.
    The local shipped record is cleared, so a later push sends everything again."""
    url, token = joined()
    request = urllib.request.Request(f"{url}/v1/me/sessions", method="DELETE",
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise TeamError(f"the server refused the withdrawal (HTTP {exc.code})", why=_detail(exc)) from None
    except (urllib.error.URLError, OSError) as exc:
        raise TeamError("the team's server cannot be reached", why=str(exc), fix="try again when it is up") from None
    _shipped_path().unlink(missing_ok=True)
    return int(answer.get("withdrawn", 0)), list(answer.get("datasets_built_with_them") or [])
