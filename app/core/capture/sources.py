"""Where agents write their transcripts (configurable roots), which files there are sessions, and project rules."""
from __future__ import annotations

import fnmatch
import json
from pathlib import Path, PurePath

from pydantic import BaseModel, Field, ValidationError

from app.core.base import paths
from app.core.base.files import atomic_write
from app.core.capture import agents

CONFIG_FILE = "capture.json"


class CaptureConfig(BaseModel):
    """What to watch and which projects to keep: saved as capture.json in the data dir."""

    roots: dict[str, list[str]] = Field(default_factory=agents.default_roots)
    include: list[str] = Field(default_factory=list)  # project name or cwd globs; empty = every project
    exclude: list[str] = Field(default_factory=list)  # wins over include
    watch: bool = True
    workers: int = Field(default=0, ge=0)  # processes preparing a big scan's files: 0 = one per core (up to 8), 1 = none
    # models whose sessions are the student's own work, never the teacher's (names or globs, any case: "qwen2.5-coder*",
    # "ollama/*"); the school's served student is always one (capture/actors)
    not_teachers: list[str] = Field(default_factory=list)

    @classmethod
    def load(cls, path: Path | None = None) -> CaptureConfig:
        """The saved config, or the defaults; a damaged file is named in the error, never overwritten silently."""
        path = path or paths.data_dir() / CONFIG_FILE
        if not path.exists():
            return cls()
        try:
            return cls.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, ValidationError) as exc:
            raise ValueError(f"capture settings in {path} cannot be read ({exc.__class__.__name__}): "
                             f"fix or delete the file to go back to the defaults") from exc

    def save(self, path: Path | None = None) -> Path:
        path = path or paths.data_dir() / CONFIG_FILE
        return atomic_write(path, self.model_dump_json(indent=2))

    def keeps(self, project: str | None, cwd: str | None) -> bool:
        """False when a rule keeps this project out: exclude wins; with include rules, only matches are kept."""
        names = [n for n in (project, cwd) if n]
        hit = lambda rules: any(fnmatch.fnmatch(n, r) for n in names for r in rules)  # noqa: E731
        if hit(self.exclude):
            return False
        return not self.include or hit(self.include)

    def agent_for(self, path: Path) -> str | None:
        """The agent whose root holds this file and whose file naming it follows; None otherwise."""
        for agent, roots in self.roots.items():
            for root in roots:
                if _under(path, Path(root)) and is_session_file(agent, path):
                    return agent
        return None


def is_session_file(agent: str, path: PurePath) -> bool:
    """Whether a file under that agent's roots is one of its session files (False for an agent not in the table)."""
    found = agents.named(agent)
    return found is not None and found.holds(path)


def session_files(config: CaptureConfig) -> list[tuple[str, Path]]:
    """Every session file under the configured roots, oldest first (agent, path)."""
    found: list[tuple[float, str, Path]] = []
    for agent, roots in config.roots.items():
        for root in map(Path, roots):
            if not root.is_dir():
                continue
            for path in root.rglob("*.json*"):
                if path.is_file() and is_session_file(agent, path):
                    found.append((_mtime(path), agent, path))
    return [(agent, path) for _, agent, path in sorted(found)]


def _under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
