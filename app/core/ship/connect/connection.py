"""The steps of `nightschool connect` / `disconnect` (the CLI, the Ship tab and scripts call these): the plan (what
is written where, shown before writing and by --dry-run), the write with backups, the live check, the exact
restore, and which tools are connected."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from app.core.capture import actors
from app.core.ship.connect import check as live_check, edits as files
from app.core.ship.connect.agent import Agent
from app.core.ship.connect.agents import AGENTS, named
from app.core.ship.connect.endpoint import Endpoint, current


@dataclass
class Plan:
    agent: Agent
    endpoint: Endpoint
    edits: list[files.Edit]
    files: list[dict] = field(default_factory=list)  # each edit as shown: path, create|modify, what, added, backup

    def payload(self) -> dict:
        return {"agent": self.agent.name, "title": self.agent.title, "docs": self.agent.docs, "wire": self.agent.wire,
                "endpoint": self.endpoint.payload(), "files": self.files, "key": self.agent.key_note,
                "run": self.agent.usage(self.endpoint)}


@dataclass
class Outcome:
    plan: Plan
    written: bool
    check: live_check.Check | None

    def payload(self) -> dict:
        return {**self.plan.payload(), "dry_run": not self.written, "written": self.written,
                "check": self.check.payload() if self.check else None}


def plan(name: str) -> Plan:
    """What connecting `name` would write, and where (nothing is written)."""
    agent = named(name)
    ep = current()
    planned = agent.edits(ep)
    return Plan(agent, ep, planned, [e.payload(files.backup_for(agent.name, e.path)) for e in planned])


def connect(name: str, dry_run: bool = False, check: bool = True) -> Outcome:
    """Back up and write the tool's config (not with dry_run), then one live tool-calling request. The model name
    the tool will ask for is remembered as the student's (capture/actors): its sessions there are never teacher work."""
    made = plan(name)
    if not dry_run:
        actors.remember([made.endpoint.model])
        files.apply(made.agent.name, made.edits)
    result = live_check.live(made.endpoint, made.agent.wire) if check else None
    return Outcome(made, not dry_run, result)


def disconnect(name: str, force: bool = False) -> list[dict]:
    """Every file connect wrote, back exactly as it was (a file it created, deleted)."""
    agent = named(name)
    return files.restore(agent.name, agent.title, force=force)


def connections() -> list[dict]:
    """Each tool: connected or not, since when, the files written, and any changed since (disconnect refuses those
    without --force)."""
    out = []
    for agent in AGENTS.values():
        record = files.manifest(agent.name)
        out.append({"agent": agent.name, "title": agent.title, "connected": record is not None,
                    "connected_at": record.get("connected_at") if record else None,
                    "files": [e["path"] for e in record["files"]] if record else [],
                    "changed": files.changed_since(record) if record else []})
    return out


def is_connected(name: str) -> bool:
    return files.manifest(named(name).name) is not None


def shown(path: str | Path) -> str:
    """A path as the person reads it: ~ for their home."""
    text, home = str(path), str(Path.home())
    return "~" + text[len(home):] if text == home or text.startswith(home + "/") else text
