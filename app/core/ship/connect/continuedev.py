"""Continue (the VS Code / JetBrains extension): a model entry `Nightschool student` (provider openai, apiBase, the
tool_use capability) in its global config.yaml, and the key in its global .env as NIGHTSCHOOL_API_KEY, which the
entry reads as `${{ secrets.NIGHTSCHOOL_API_KEY }}` (Continue resolves local secrets from ~/.continue/.env, not from
the process environment). That .env is written readable by this user only, and connect says so.

Format read from the Continue docs: https://docs.continue.dev/customize/model-providers/top-level/openai (an
OpenAI-compatible server: provider openai + apiBase + apiKey) and https://docs.continue.dev/reference (config.yaml in
the global ~/.continue folder: name, version, schema, models with roles and capabilities; a config.yaml is loaded
instead of a legacy config.json, so a config.json alone is refused rather than silently replaced)."""
from __future__ import annotations

import os
import re
from pathlib import Path

from app.core.ship.connect import yamlfile
from app.core.ship.connect.agent import CHAT, Agent
from app.core.ship.connect.edits import Edit, read_text, unmergeable
from app.core.ship.connect.endpoint import KEY_ENV, TITLE, Endpoint

DOCS = "https://docs.continue.dev/customize/model-providers/top-level/openai"
NEW_CONFIG = {"name": "Local Config", "version": "1.0.0", "schema": "v1"}


def home() -> Path:
    return Path(os.environ.get("CONTINUE_GLOBAL_DIR") or Path.home() / ".continue").expanduser()


def model(ep: Endpoint) -> dict:
    return {"name": TITLE, "provider": "openai", "model": ep.model, "apiBase": ep.base_url,
            "apiKey": "${{ secrets." + ep.key_env + " }}", "roles": ["chat", "edit", "apply"],
            "capabilities": ["tool_use"]}


def _config_edit(ep: Endpoint) -> Edit:
    path = home() / "config.yaml"
    text = read_text(path)
    entry = model(ep)
    block = yamlfile.block({"models": [entry]})
    if not text and (home() / "config.json").exists():
        raise unmergeable(path, f"Continue is set up with the legacy {home() / 'config.json'}, and a config.yaml "
                          "would be loaded instead of it", block + "\n(or migrate to config.yaml first: "
                          "https://docs.continue.dev/reference/yaml-migration)")
    doc = yamlfile.load(path, text, block)
    if doc.data is None:
        doc = yamlfile.load(path, yamlfile.Doc(NEW_CONFIG).dump(), block)
    data = doc.data
    if hasattr(data, "keys") and data.get("models") is None:
        data["models"] = []
    if not hasattr(data, "keys") or not isinstance(data["models"], list):
        raise unmergeable(path, "it is not a mapping with a `models` list", block)
    models = data["models"]
    for n in reversed(range(len(models))):  # an earlier connect's entry is replaced
        if hasattr(models[n], "get") and models[n].get("name") == TITLE:
            del models[n]
    models.append(entry)
    return Edit(path, doc.dump().encode(), block, f"the model `{TITLE}` (chat, edit, apply; tool use)")


def _env_edit(ep: Endpoint) -> Edit:
    path = home() / ".env"
    text = read_text(path)
    line = f"{KEY_ENV}={ep.key()}"
    pattern = re.compile(rf"^\s*(export\s+)?{KEY_ENV}\s*=.*$", re.MULTILINE)
    if pattern.search(text):
        after = pattern.sub(lambda _m: line, text)
    else:
        after = text + ("\n" if text and not text.endswith("\n") else "") + line + "\n"
    return Edit(path, after.encode(), f"{KEY_ENV}=<the key in {ep.key_file}>",
                f"the API key as {KEY_ENV} (this file is made readable by you only: 0600)", secret=True)


def edits(ep: Endpoint) -> list[Edit]:
    return [_config_edit(ep), _env_edit(ep)]


def usage(ep: Endpoint) -> list[str]:
    return [f"In Continue, pick '{TITLE}' in the model menu (the key is read from {home() / '.env'})"]


AGENT = Agent("continue", "Continue", DOCS, CHAT, edits, usage,
              f"Continue reads local secrets only from the .env in its global folder, so the key is written there "
              f"as {KEY_ENV}, in a file made readable by you only (0600)")
