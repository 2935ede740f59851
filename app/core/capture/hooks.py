"""Claude Code hooks: install/uninstall the Stop and SessionEnd hooks that trigger an ingest, and read their stdin."""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.base.errors import Explained
from app.core.base.files import atomic_write
from app.core.capture.agents import AGENTS

AGENT = "claude-code"  # the agent whose hooks these are: a hook's transcript is its
HOOK_EVENTS = ("Stop", "SessionEnd")
HOOK_SUBCOMMAND = "capture hook"  # appended to the caller's command: `<command> capture hook`
# An entry is ours when its command contains every one of these substrings ("nightschool" comes from the console
# script's name, "capture hook" from the subcommand); nothing else in the settings file is ever changed.
OUR_MARKERS = ("nightschool", HOOK_SUBCOMMAND)
HOOK_TIMEOUT_S = 30  # seconds Claude Code gives our hook before cancelling it
BACKUP_SUFFIX = ".nightschool-backup"  # settings.json -> settings.json.nightschool-backup
MAX_HOOK_INPUT_BYTES = 4 * 1024**2  # hook stdin larger than this is not parsed


class HooksError(Explained, RuntimeError):
    """The settings file cannot be read, parsed or written; the message says what, why and what to do."""


@dataclass
class HookChange:
    """What install/uninstall did to one settings file."""
    path: Path
    added: list[str] = field(default_factory=list)  # events whose entry was added (or replaced)
    already: list[str] = field(default_factory=list)  # events already installed exactly so
    backup: Path | None = None  # backup written by this call (only before the first change ever)
    removed: list[str] = field(default_factory=list)  # events whose entries were removed

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


@dataclass
class HookInput:
    """The JSON Claude Code passes on a hook's stdin, the fields we use."""
    session_id: str | None
    transcript_path: Path | None
    cwd: Path | None
    event: str | None


def settings_path() -> Path:
    """Claude Code's user settings: $CLAUDE_CONFIG_DIR/settings.json, else ~/.claude/settings.json."""
    agent = AGENTS[AGENT]
    config_dir = os.environ.get(agent.home_env or "", "").strip()
    base = Path(config_dir).expanduser() if config_dir else Path.home() / agent.home
    return base / "settings.json"


def hook_command(command: str) -> str:
    """The command line written into settings for the caller's (already shell-quoted) command."""
    return f"{command.strip()} {HOOK_SUBCOMMAND}"


def is_ours(hook: Any) -> bool:
    """Whether one hook entry (inside a matcher group) is a Nightschool one."""
    command = hook.get("command") if isinstance(hook, dict) else None
    return isinstance(command, str) and all(marker in command for marker in OUR_MARKERS)


def install(command: str, path: Path | None = None) -> HookChange:
    """Add our hook for every HOOK_EVENTS event (replacing an older entry of ours), keeping everything else."""
    wanted = _wanted_hook(command)
    target = _target(path)
    data = _load(target, "install")
    hooks = _hooks_table(data, target, create=True)
    change = HookChange(path=target)
    for event in HOOK_EVENTS:
        groups = _event_groups(hooks, event, target, create=True)
        if _installed_exactly(groups, wanted):
            change.already.append(event)
        else:
            _remove_ours(groups)
            groups.append({"hooks": [dict(wanted)]})
            change.added.append(event)
    if change.changed:
        change.backup = _save(target, data)
    return change


def uninstall(path: Path | None = None) -> HookChange:
    """Remove our entries (and the containers they leave empty); the user's hooks and settings are untouched."""
    target = _target(path)
    change = HookChange(path=target)
    if not target.exists():
        return change
    data = _load(target, "uninstall")
    hooks = _hooks_table(data, target, create=False)
    for event in HOOK_EVENTS:
        groups = _event_groups(hooks, event, target, create=False)
        if _remove_ours(groups):
            change.removed.append(event)
            _drop_if_empty(hooks, event)
    if change.removed:
        _drop_if_empty(data, "hooks")
        change.backup = _save(target, data)
    return change


def status(path: Path | None = None) -> dict[str, bool]:
    """Event -> whether an entry of ours is installed for it."""
    target = _target(path)
    data = _load(target, "check") if target.exists() else {}
    hooks = data.get("hooks")
    hooks = hooks if isinstance(hooks, dict) else {}
    return {event: any(_ours_in(group) for group in _groups_of(hooks.get(event))) for event in HOOK_EVENTS}


def read_hook_input(stream) -> HookInput | None:
    """Parse a hook's stdin (text or binary stream); None for anything that is not a usable JSON object."""
    data = _parse_object(_read_capped(stream))
    if data is None:
        return None
    found = HookInput(session_id=_clean_str(data.get("session_id")),
                      transcript_path=_clean_path(data.get("transcript_path")),
                      cwd=_clean_path(data.get("cwd")),
                      event=_clean_str(data.get("hook_event_name")))
    return found if found.session_id or found.transcript_path else None


# --- install/uninstall helpers ---------------------------------------------------------------------------------

def _wanted_hook(command: str) -> dict[str, Any]:
    """Our hook entry for command; refuses a command we could not recognise again (so never uninstall)."""
    if not isinstance(command, str) or not command.strip() or "\n" in command or "\r" in command:
        raise HooksError(f"Cannot install the Claude Code hook: the command {command!r} is empty or spans lines. "
                         "Pass the path of the nightschool executable.")
    line = hook_command(command)
    if not all(marker in line for marker in OUR_MARKERS):
        raise HooksError(f"Cannot install the Claude Code hook: the command {line!r} does not contain "
                         f"{OUR_MARKERS[0]!r}, so it could not be recognised (or removed) later. "
                         "Pass the path of the nightschool executable.")
    return {"type": "command", "command": line, "timeout": HOOK_TIMEOUT_S}


def _target(path: Path | str | None) -> Path:
    """The settings file to edit: path or settings_path(), following a symlink so the link itself survives."""
    target = Path(path).expanduser() if path is not None else settings_path()
    return Path(os.path.realpath(target)) if target.is_symlink() else target


def _hooks_table(data: dict, path: Path, create: bool) -> dict:
    """data["hooks"] (created when create); install refuses a "hooks" that is not an object."""
    if "hooks" not in data:
        if not create:
            return {}
        data["hooks"] = {}
    hooks = data["hooks"]
    if not isinstance(hooks, dict):
        if not create:
            return {}  # nothing of ours can be inside it
        raise HooksError(_shape_message(path, '"hooks" is not a JSON object'))
    return hooks


def _event_groups(hooks: dict, event: str, path: Path, create: bool) -> list:
    """hooks[event], the list of matcher groups (created when create); install refuses one that is not a list."""
    if event not in hooks:
        if not create:
            return []
        hooks[event] = []
    groups = hooks[event]
    if not isinstance(groups, list):
        if not create:
            return []  # nothing of ours can be inside it
        raise HooksError(_shape_message(path, f'"hooks.{event}" is not a JSON array'))
    return groups


def _groups_of(groups: Any) -> list[dict]:
    """The well-formed matcher groups of an event (anything else is left alone)."""
    if not isinstance(groups, list):
        return []
    return [g for g in groups if isinstance(g, dict) and isinstance(g.get("hooks"), list)]


def _ours_in(group: dict) -> bool:
    return any(is_ours(hook) for hook in group["hooks"])


def _installed_exactly(groups: list, wanted: dict) -> bool:
    """Whether the event holds exactly one entry of ours, and it is the wanted one."""
    ours = [hook for group in _groups_of(groups) for hook in group["hooks"] if is_ours(hook)]
    return ours == [wanted]


def _remove_ours(groups: list) -> bool:
    """Drop our entries from every group, and the groups that leaves empty; True if anything was removed."""
    touched = [group for group in _groups_of(groups) if _ours_in(group)]
    for group in touched:
        group["hooks"] = [hook for hook in group["hooks"] if not is_ours(hook)]
    emptied = {id(group) for group in touched if not group["hooks"]}
    groups[:] = [group for group in groups if id(group) not in emptied]
    return bool(touched)


def _drop_if_empty(container: dict, key: str) -> None:
    if container.get(key) in ({}, []):
        del container[key]


# --- reading and writing the settings file -------------------------------------------------------------------

def _load(path: Path, action: str) -> dict:
    """The settings as a dict ({} when missing or blank); refuses text that is not a JSON object."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise HooksError(f"Cannot {action} the Claude Code hook: {path} could not be read ({exc}). "
                         "Check the file's permissions and encoding (UTF-8), then try again.") from exc
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HooksError(f"Cannot {action} the Claude Code hook: {path} is not valid JSON ({exc}). "
                         "Nightschool never overwrites a file it cannot parse; fix the file "
                         "(or move it aside), then try again.") from exc
    if not isinstance(data, dict):
        raise HooksError(_shape_message(path, "its top level is not a JSON object"))
    return data


def _shape_message(path: Path, why: str) -> str:
    return (f"Cannot edit the Claude Code hooks in {path}: {why}, which Claude Code does not expect. "
            "Nightschool leaves the file as it is; fix it by hand, then try again.")


def _save(path: Path, data: dict) -> Path | None:
    """Back the file up (first change only), then write data atomically; returns the backup made now, if any."""
    backup = _backup(path)
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    try:
        atomic_write(path, text, mode=0o600, keep_mode=True)
    except OSError as exc:
        raise HooksError(f"Cannot write the Claude Code settings {path} ({exc}). The file was left as it was; "
                         "check the folder's permissions and free space, then try again.") from exc
    return backup


def _backup(path: Path) -> Path | None:
    """Copy path to path + BACKUP_SUFFIX unless it is missing or a backup already exists."""
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    if not path.exists() or backup.exists():
        return None
    try:
        shutil.copy2(path, backup)
    except OSError as exc:
        raise HooksError(f"Cannot back up the Claude Code settings {path} to {backup} ({exc}); nothing was changed. "
                         "Check the folder's permissions, then try again.") from exc
    return backup


# --- hook stdin ---------------------------------------------------------------------------------------------------

def _read_capped(stream) -> str | None:
    """Up to MAX_HOOK_INPUT_BYTES of stream as text; None when it cannot be read or is larger."""
    try:
        raw = stream.read(MAX_HOOK_INPUT_BYTES + 1)
    except (OSError, ValueError, UnicodeDecodeError, AttributeError, TypeError):
        return None
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    if not isinstance(raw, str) or len(raw) > MAX_HOOK_INPUT_BYTES:
        return None
    return raw


def _parse_object(text: str | None) -> dict | None:
    if not text or not text.strip():
        return None
    try:
        data = json.loads(text.lstrip("\ufeff"))
    except (json.JSONDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _clean_str(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value if value and "\x00" not in value else None


def _clean_path(value: Any) -> Path | None:
    text = _clean_str(value)
    return Path(text).expanduser() if text else None
