"""A `"module:Name"` reference loaded lazily: how the tables of agents, backends and tabs name their code."""
from __future__ import annotations

from importlib import import_module
from typing import Any


def load(ref: str) -> Any:
    """What a `"module:Name"` names (a function, a class), its module imported now if it was not yet."""
    module, _, name = ref.partition(":")
    return getattr(import_module(module), name)
