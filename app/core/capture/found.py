"""Which agents' transcript folders exist under the capture roots and how many sessions each holds (read-only)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from app.core.capture.agents import AGENTS
from app.core.capture.ingest import owner
from app.core.capture.sources import CaptureConfig, session_files


@dataclass(frozen=True)
class AgentFolders:
    """One agent: the folders looked in, those that exist, and its sessions (a Claude sub-agent file is part of its
    session, as capture stores it)."""

    agent: str
    label: str
    roots: list[str]
    existing: list[str] = field(default_factory=list)
    sessions: int = 0

    @property
    def found(self) -> bool:
        return bool(self.existing)


def agent_folders(config: CaptureConfig) -> list[AgentFolders]:
    """Every known agent (and any other agent the config names), in the table's order, with its session count."""
    owners: dict[str, set[Path]] = {}
    for agent, path in session_files(config):
        try:
            main = owner(agent, path)
        except OSError:  # the file went away while we looked
            continue
        if main is not None:
            owners.setdefault(agent, set()).add(main)
    agents = list(AGENTS) + [a for a in config.roots if a not in AGENTS]
    return [AgentFolders(agent, AGENTS[agent].label if agent in AGENTS else agent, list(config.roots.get(agent, [])),
                         [r for r in config.roots.get(agent, []) if Path(r).is_dir()], len(owners.get(agent, ())))
            for agent in agents]
