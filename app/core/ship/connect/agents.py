"""The tools `nightschool connect` knows: one table, in the order the Ship tab and `connect` list them."""
from __future__ import annotations

from app.core.ship.connect import aider, codex, continuedev, opencode
from app.core.ship.connect.agent import Agent
from app.core.ship.errors import ShipError

AGENTS: dict[str, Agent] = {a.name: a for a in (codex.AGENT, opencode.AGENT, aider.AGENT, continuedev.AGENT)}


def named(name: str) -> Agent:
    try:
        return AGENTS[name.lower()]
    except KeyError:
        raise ShipError(f"nightschool cannot connect {name!r}", why="it knows " + ", ".join(AGENTS),
                        fix="nightschool connect lists them with their state") from None
