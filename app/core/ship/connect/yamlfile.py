"""YAML configs merged without losing what is in them: ruamel.yaml's round trip keeps comments and key order, and the
file's own list indentation is guessed and written back the same way."""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.ship.connect.edits import unmergeable


@dataclass
class Doc:
    data: Any  # the round-trip document; None for an empty or comments-only file
    sequence: int = 4  # a list item's content, from its parent key's column
    offset: int = 2  # the dash, from its parent key's column

    def dump(self) -> str:
        out = io.StringIO()
        _yaml(self.sequence, self.offset).dump(self.data, out)
        return out.getvalue()


def _yaml(sequence: int = 4, offset: int = 2):
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.indent(mapping=max(sequence - offset, 2), sequence=sequence, offset=offset)
    yaml.width = 4096  # never fold a long line the person wrote
    return yaml


def load(path: Path, text: str, block: str) -> Doc:
    """The document and its list style (Continue's docs' style when it has no list); not YAML: a refusal."""
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.util import load_yaml_guess_indent

    try:
        data, sequence, offset = load_yaml_guess_indent(text, yaml=_yaml())
    except YAMLError as exc:
        raise unmergeable(path, f"it is not valid YAML ({str(exc).splitlines()[0]})", block) from exc
    if offset is None or sequence is None:
        return Doc(data)
    return Doc(data, sequence, offset)


def block(data) -> str:
    """A mapping as the YAML lines shown before writing."""
    return Doc(data).dump().strip()
