"""The served student as an agent tool sees it: the base URL, the stable model name it asks for, the API key's
environment variable and the file the key is kept in (never the key itself in what is shown)."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from app.core.ship import serving

PROVIDER_ID = "nightschool"  # the provider / profile name the tools' configs get
STUDENT_MODEL = serving.SERVED_MODEL  # the name the server lists in /v1/models, whichever file is deployed
KEY_ENV = "NIGHTSCHOOL_API_KEY"  # the environment variable a tool reads the server's key from
TITLE = "Nightschool student"


@dataclass(frozen=True)
class Endpoint:
    """Where the student is served (running or not) and how a client authenticates."""

    base_url: str  # http://127.0.0.1:8765/v1
    running: bool
    key_file: Path
    model: str = STUDENT_MODEL
    key_env: str = KEY_ENV

    @property
    def export_line(self) -> str:
        """The shell line that puts the key in the tools' environment variable (reads the file; shows no key)."""
        return self.export_as(self.key_env)

    def export_as(self, variable: str) -> str:
        return f'export {variable}="$(cat {shlex.quote(str(self.key_file))})"'

    def key(self) -> str:
        """The key itself, for the one tool that must have it in a file (Continue's .env) and the live check."""
        return serving.api_key()

    def payload(self) -> dict:
        return {"base_url": self.base_url, "running": self.running, "model": self.model, "key_env": self.key_env,
                "key_file": str(self.key_file)}


def current() -> Endpoint:
    """The running server's URL, else the one `nightschool serve` starts on (the key is made once if missing)."""
    serving.api_key()
    st = serving.state()
    url = st["url"] if st else f"http://127.0.0.1:{serving.DEFAULT_PORT}/v1"
    return Endpoint(base_url=url.rstrip("/"), running=st is not None, key_file=serving.serve_dir() / "api_key")
