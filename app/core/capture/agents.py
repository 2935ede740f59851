"""The one table of agent CLIs whose transcripts capture reads: names, labels, colours, folders, files, parsers."""
from __future__ import annotations

import os
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path, PurePath

from app.core.base.refs import load  # noqa: F401  (agents.load: a row's "module:function")


@dataclass(frozen=True)
class Agent:
    """One agent CLI. Each `"module:function"` names a function of its parser module (capture/parsers/), imported
    when first called (`load`):
    - parser(path, final=, progress=[, spill=]) -> Session;
    - detect(record) -> bool: this record shows a file is this agent's transcript (capture reads it with `parser`);
    - resembles(record) -> bool: a record looks like this agent's transcript, broadly (a dropped dataset file of such
      records is refused as a transcript);
    - document(doc) -> bool: a whole file that is one JSON document is this agent's session (optional);
    - owner(path) -> Path | None: the file whose session a file is part of, None for an internal file (optional:
      each file is its own session);
    - companions(main) -> int: the bytes of a session's other files, read with it (optional)."""

    name: str  # as stored (sessions.agent, imports.agent) and keyed in capture.json's roots
    label: str  # as the app lists it
    title: str  # the program, as a refusal names its transcripts ("a … transcript")
    colour: str  # its colour in the GUI's charts
    home: str  # its folder in the home directory …
    roots: tuple[str, ...]  # … and the folders in it that hold its transcripts
    files: tuple[str, ...]  # a session file's name (case-sensitive fnmatch patterns)
    parser: str
    detect: str
    resembles: str
    home_env: str | None = None  # the environment variable that moves its home folder
    folder: str | None = None  # the name of the folder a session file sits in, if it must
    document: str | None = None
    owner: str | None = None
    companions: str | None = None
    spills: bool = False  # its parser keeps a huge transcript's records and messages in a spill file when given one
    counts_used: bool = False  # its parser counts the records it used (Session.used): those are the stored lines
    broad: bool = False  # its recognisers are the broadest: asked after every other agent's

    def default_roots(self) -> list[str]:
        """Where it writes transcripts on this machine (its home moved by `home_env` when that is set)."""
        home = Path((os.environ.get(self.home_env) if self.home_env else None) or Path.home() / self.home)
        return [str(home / root) for root in self.roots]

    def holds(self, path: PurePath) -> bool:
        """Whether a file under its roots is one of its session files, by its name (and its folder's)."""
        return (self.folder is None or path.parent.name == self.folder) \
            and any(fnmatchcase(path.name, pattern) for pattern in self.files)


AGENTS: dict[str, Agent] = {a.name: a for a in (  # in the order the app lists them
    Agent("claude-code", "Claude Code", "Claude Code", "#ff9f43", ".claude", ("projects",), ("*.jsonl",),
          "app.core.capture.parsers.claude:parse_claude_with_subagents",
          "app.core.capture.parsers.claude:detect", "app.core.capture.parsers.claude:resembles",
          home_env="CLAUDE_CONFIG_DIR", owner="app.core.capture.parsers.claude:owner",
          companions="app.core.capture.parsers.claude:subagent_bytes", spills=True, counts_used=True, broad=True),
    Agent("codex", "Codex", "Codex CLI", "#2ecc71", ".codex", ("sessions", "archived_sessions"), ("rollout-*.jsonl",),
          "app.core.capture.parsers.codex:parse_codex",
          "app.core.capture.parsers.codex:detect", "app.core.capture.parsers.codex:resembles",
          home_env="CODEX_HOME"),
    Agent("gemini", "Gemini CLI", "Gemini CLI", "#4f8cff", ".gemini", ("tmp",), ("session-*.json", "session-*.jsonl"),
          "app.core.capture.parsers.gemini:parse_gemini",
          "app.core.capture.parsers.gemini:detect", "app.core.capture.parsers.gemini:resembles",
          folder="chats", document="app.core.capture.parsers.gemini:document"),
)}


def named(name: str | None) -> Agent | None:
    return AGENTS.get(name) if name else None


def asked() -> list[Agent]:
    """The order recognisers are asked in: the table's, the broad ones last."""
    return sorted(AGENTS.values(), key=lambda a: a.broad)


def detected(record: dict) -> str | None:
    """The agent whose transcript this record shows the file to be, or None."""
    return next((a.name for a in asked() if load(a.detect)(record)), None)


def detected_document(doc: dict) -> str | None:
    """The agent whose session this whole JSON document is, or None."""
    return next((a.name for a in asked() if a.document and load(a.document)(doc)), None)


def resembled(record: dict) -> Agent | None:
    """The agent whose transcript this record looks like (broadly: a dataset file of them is refused), or None."""
    return next((a for a in asked() if load(a.resembles)(record)), None)


def titles() -> str:
    """Every agent's program, as a refusal lists them: "A, B or C"."""
    names = [a.title for a in AGENTS.values()]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


def default_roots() -> dict[str, list[str]]:
    return {a.name: a.default_roots() for a in AGENTS.values()}


def colours() -> dict[str, str]:
    return {a.name: a.colour for a in AGENTS.values()}


def home_vars() -> tuple[str, ...]:
    """The environment variables that move an agent's folders (a service passes them on)."""
    return tuple(a.home_env for a in AGENTS.values() if a.home_env)
