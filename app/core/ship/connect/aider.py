"""aider: `model: openai/nightschool` and `openai-api-base` in ~/.aider.conf.yml (merged, comments kept); the
key from AIDER_OPENAI_API_KEY, the environment variable aider reads for --openai-api-key (it wins over the file's
openai-api-key, and leaves OPENAI_API_KEY to the person's other tools).

Format read from the aider docs: https://aider.chat/docs/llms/openai-compat.html (an OpenAI-compatible endpoint:
OPENAI_API_BASE / --openai-api-base, the model named openai/<model>), https://aider.chat/docs/config/aider_conf.html
(.aider.conf.yml in the home dir, keys named as the options) and https://aider.chat/docs/config/options.html
(Environment variable: AIDER_OPENAI_API_KEY)."""
from __future__ import annotations

from pathlib import Path

from app.core.ship.connect import yamlfile
from app.core.ship.connect.agent import CHAT, Agent
from app.core.ship.connect.edits import Edit, read_text, unmergeable
from app.core.ship.connect.endpoint import Endpoint

DOCS = "https://aider.chat/docs/llms/openai-compat.html"
KEY_ENV = "AIDER_OPENAI_API_KEY"


def config_path() -> Path:
    return Path.home() / ".aider.conf.yml"


def settings(ep: Endpoint) -> dict:
    return {"model": f"openai/{ep.model}", "openai-api-base": ep.base_url}


def edits(ep: Endpoint) -> list[Edit]:
    path = config_path()
    text = read_text(path)
    wanted = settings(ep)
    block = yamlfile.block(wanted)
    doc = yamlfile.load(path, text, block)
    if doc.data is None:  # no file, or only comments (aider's own sample is all comments): the keys go after them
        after = text + ("\n" if text and not text.endswith("\n") else "") + block + "\n"
    elif hasattr(doc.data, "keys"):
        doc.data.update(wanted)
        after = doc.dump()
    else:
        raise unmergeable(path, "it is not a mapping of options", block)
    return [Edit(path, after.encode(), block, "the student as aider's model, at the served endpoint")]


def usage(ep: Endpoint) -> list[str]:
    return [ep.export_as(KEY_ENV), "aider"]


AGENT = Agent("aider", "aider", DOCS, CHAT, edits, usage,
              f"aider reads the key from the environment variable {KEY_ENV}: it is written into no file")
