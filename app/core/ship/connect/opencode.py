"""opencode: a `nightschool` provider (the `@ai-sdk/openai-compatible` package, for /v1/chat/completions) in the
global config $XDG_CONFIG_HOME/opencode/opencode.json, its key read from NIGHTSCHOOL_API_KEY through opencode's
`{env:…}` substitution; the person picks it with `opencode --model nightschool/nightschool` or /models.

Format read from the opencode docs: https://opencode.ai/docs/providers/ (Custom provider: npm, name,
options.baseURL, options.apiKey "{env:VAR}", models) and https://opencode.ai/docs/config/ (the global config is
~/.config/opencode/opencode.json; JSONC is allowed — a file with comments is refused here rather than losing them)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from app.core.ship.connect.agent import CHAT, Agent
from app.core.ship.connect.edits import Edit, read_text, unmergeable
from app.core.ship.connect.endpoint import KEY_ENV, PROVIDER_ID, TITLE, Endpoint

DOCS = "https://opencode.ai/docs/providers/"
SCHEMA = "https://opencode.ai/config.json"


def config_path() -> Path:
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config").expanduser()
    return base / "opencode" / "opencode.json"


def provider(ep: Endpoint) -> dict:
    return {"npm": "@ai-sdk/openai-compatible", "name": TITLE,
            "options": {"baseURL": ep.base_url, "apiKey": "{env:" + ep.key_env + "}"},
            "models": {ep.model: {"name": TITLE, "tool_call": True}}}


def _indent(text: str) -> int:
    found = re.search(r"^( +)\S", text, re.MULTILINE)
    return len(found.group(1)) if found else 2


def edits(ep: Endpoint) -> list[Edit]:
    path = config_path()
    text = read_text(path)
    entry = provider(ep)
    block = json.dumps({"provider": {PROVIDER_ID: entry}}, indent=2)
    try:
        data = json.loads(text) if text.strip() else {"$schema": SCHEMA}
    except ValueError as exc:
        raise unmergeable(path, f"it is not plain JSON ({exc.args[0]}): comments or trailing commas (JSONC) would be "
                          "lost by a rewrite", block) from exc
    if not isinstance(data, dict) or not isinstance(data.setdefault("provider", {}), dict):
        raise unmergeable(path, "it is not an object with a `provider` object", block)
    data["provider"][PROVIDER_ID] = entry
    after = json.dumps(data, indent=_indent(text), ensure_ascii=False) + "\n"
    return [Edit(path, after.encode(), block, f"the provider `{PROVIDER_ID}` with the model `{ep.model}`")]


def usage(ep: Endpoint) -> list[str]:
    return [ep.export_line, f"opencode --model {PROVIDER_ID}/{ep.model}"]


AGENT = Agent("opencode", "opencode", DOCS, CHAT, edits, usage,
              f"opencode reads the key from the environment variable {KEY_ENV} ({{env:{KEY_ENV}}} in its config): "
              "it is written into no file")
