"""What every connectable tool module gives: its name, where its config format was read, the API it speaks, the file
edits for an endpoint, and the lines the person runs afterwards."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.core.ship.connect.edits import Edit
from app.core.ship.connect.endpoint import Endpoint

CHAT, RESPONSES = "chat", "responses"  # /v1/chat/completions or /v1/responses


@dataclass(frozen=True)
class Agent:
    """A tool `nightschool connect` sets up (one module each, listed in agents.AGENTS)."""

    name: str  # what `nightschool connect` takes: codex
    title: str  # Codex CLI
    docs: str  # the page its config format was read from
    wire: str  # CHAT | RESPONSES: the API the tool sends its requests to
    edits: Callable[[Endpoint], list[Edit]]
    usage: Callable[[Endpoint], list[str]]  # what to run next (the key's export line, never the key)
    key_note: str  # how the tool gets the key, said before writing
