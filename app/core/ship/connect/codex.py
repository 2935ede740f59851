"""Codex CLI: a `[model_providers.nightschool]` entry in $CODEX_HOME/config.toml (merged with tomlkit: comments and
order kept) and the profile file nightschool.config.toml beside it, so `codex --profile nightschool` uses the student;
the key comes from NIGHTSCHOOL_API_KEY (`env_key`).

Format read from the Codex docs: https://developers.openai.com/codex/config-advanced (custom model providers: name,
base_url, env_key, wire_api; profiles are $CODEX_HOME/<name>.config.toml files of top-level keys — since Codex 0.134
`--profile` no longer reads `[profiles.<name>]` tables) and https://developers.openai.com/codex/config-reference
(`wire_api`: "responses" is the only value Codex accepts now, so Codex sends POST <base_url>/responses)."""
from __future__ import annotations

import os
from pathlib import Path

from app.core.ship.connect.agent import RESPONSES, Agent
from app.core.ship.connect.edits import Edit, read_text, unmergeable
from app.core.ship.connect.endpoint import KEY_ENV, PROVIDER_ID, TITLE, Endpoint

DOCS = "https://developers.openai.com/codex/config-advanced"


def home() -> Path:
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex").expanduser()


def _parse(path: Path, text: str, block: str):
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        return tomlkit.parse(text)
    except TOMLKitError as exc:
        raise unmergeable(path, f"it is not valid TOML ({exc})", block) from exc


def provider_table(ep: Endpoint):
    import tomlkit

    table = tomlkit.table()
    table["name"] = TITLE
    table["base_url"] = ep.base_url
    table["env_key"] = ep.key_env
    table["env_key_instructions"] = ep.export_line
    table["wire_api"] = RESPONSES
    table.add(tomlkit.nl())
    return table


def _config_edit(ep: Endpoint) -> Edit:
    import tomlkit

    path = home() / "config.toml"
    block = tomlkit.dumps({"model_providers": {PROVIDER_ID: provider_table(ep)}})
    doc = _parse(path, read_text(path), block)
    providers = doc.get("model_providers")
    if providers is None:
        providers = doc["model_providers"] = tomlkit.table(is_super_table=True)
    if not isinstance(providers, tomlkit.items.Table):
        raise unmergeable(path, "its model_providers is not a table of tables", block)
    providers[PROVIDER_ID] = provider_table(ep)
    return Edit(path, tomlkit.dumps(doc).encode(), block.strip(), f"[model_providers.{PROVIDER_ID}]: the served "
                "student, its key read from " + ep.key_env)


def _profile_edit(ep: Endpoint) -> Edit:
    import tomlkit

    path = home() / f"{PROVIDER_ID}.config.toml"
    text = read_text(path)
    block = f'model_provider = "{PROVIDER_ID}"\nmodel = "{ep.model}"'
    doc = _parse(path, text, block)
    if not text:
        doc.add(tomlkit.comment(f"codex --profile {PROVIDER_ID}: the night school's student (nightschool connect "
                                f"codex; nightschool disconnect codex removes it)"))
    doc["model_provider"] = PROVIDER_ID
    doc["model"] = ep.model
    return Edit(path, tomlkit.dumps(doc).encode(), block, f"the profile `{PROVIDER_ID}` (codex --profile "
                f"{PROVIDER_ID})")


def edits(ep: Endpoint) -> list[Edit]:
    return [_config_edit(ep), _profile_edit(ep)]


def usage(ep: Endpoint) -> list[str]:
    return [ep.export_line, f"codex --profile {PROVIDER_ID}"]


AGENT = Agent("codex", "Codex CLI", DOCS, RESPONSES, edits, usage,
              f"Codex reads the key from the environment variable {KEY_ENV} (env_key): it is written into no file")
