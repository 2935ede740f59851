"""What the desktop files say: the launcher and autostart entries (Exec quoted per the Desktop Entry spec), the MIME
package for *.jsonl, and the command that starts this Nightschool."""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from app.core.base import paths
from app.core.base.errors import Explained

APP_ID = "nightschool"
RESOURCES = paths.CODE_ROOT / "resources"
TEMPLATE = RESOURCES / "nightschool.desktop.in"
SVG = RESOURCES / "nightschool.svg"
PNG_DIR = RESOURCES / "icons"  # <size>.png, rendered once from the SVG by packaging/make_icons.py
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256)
MIME_TYPE = "application/jsonl"
RESERVED = set(" \t\n\"'\\><~|&;$*?#()`")  # an argument holding one of these is quoted (Desktop Entry spec, Exec)
MIME_XML = f"""<?xml version="1.0" encoding="UTF-8"?>
<mime-info xmlns="http://www.freedesktop.org/standards/shared-mime-info">
  <mime-type type="{MIME_TYPE}">
    <comment>JSON Lines data</comment>
    <sub-class-of type="text/plain"/>
    <glob pattern="*.jsonl"/>
  </mime-type>
</mime-info>
"""


def default_command() -> tuple[list[str], Path | None]:
    """The running `nightschool`: the bundle's binary when frozen, else the `nightschool` script beside this
    interpreter (a venv's bin), else this interpreter with -m run from the code's folder.
    Returns (argv, working dir)."""
    if paths.frozen():
        return [sys.executable], None
    script = Path(sys.executable).with_name(APP_ID)
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)], None
    return [sys.executable, "-m", "app.cli.main"], paths.CODE_ROOT


def command_argv(exec_cmd: str | Sequence[str] | None) -> tuple[list[str], Path | None]:
    """A program path (one word, spaces allowed) or an argv list; None: default_command()."""
    if exec_cmd is None:
        return default_command()
    argv = [exec_cmd] if isinstance(exec_cmd, str) else list(exec_cmd)
    if not argv or not argv[0].strip():
        raise Explained("No command to put in the launcher", "the --exec value is empty",
                        "pass the path of the nightschool program, e.g. --exec /usr/bin/nightschool")
    if any(c in arg for arg in argv for c in "\n\r\0"):
        raise Explained("The launcher's command cannot hold a line break or NUL",
                        "a desktop entry keeps each key on one line", "install nightschool under a plain path")
    return argv, None


def _escape_string(value: str) -> str:
    """A desktop entry `string` value: backslash, newline, tab and carriage return escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def quote_arg(arg: str) -> str:
    """One Exec argument: `%` doubled; quoted (with ", `, $ and \\ escaped) when it holds a reserved character."""
    arg = arg.replace("%", "%%")
    if arg and not any(c in RESERVED for c in arg):
        return arg
    inner = "".join("\\" + c if c in '"`$\\' else c for c in arg)
    return f'"{inner}"'


def exec_value(argv: Sequence[str]) -> str:
    """The command part of an Exec key, as it is written in the file (string escaping applied after quoting)."""
    return _escape_string(" ".join(quote_arg(a) for a in argv))


def launcher_text(argv: Sequence[str], workdir: Path | None = None) -> str:
    """The applications menu entry: the template with @EXEC@ filled (and Path= when the command needs its folder)."""
    try:
        template = TEMPLATE.read_text(encoding="utf-8")
    except OSError as exc:
        raise Explained(f"The launcher template {TEMPLATE} cannot be read", exc.strerror or str(exc),
                        "reinstall Nightschool (resources/ is part of it)") from exc
    text = template.replace("@EXEC@", exec_value(argv))
    if workdir is not None:
        text = text.rstrip("\n") + f"\nPath={_escape_string(str(workdir))}\n"
    return text


def autostart_text(launcher: str) -> str:
    """The login entry: the launcher's, starting the tray process (`tray --learn`: the icon, and learning in the
    background when nothing runs the school), claiming no file types, with no startup notification."""
    lines = []
    for line in launcher.splitlines():
        if line.startswith("MimeType="):
            continue
        if line.startswith("Exec="):
            line = line.removesuffix(" gui %F") + " tray --learn"
        elif line.startswith("StartupNotify="):
            line = "StartupNotify=false"  # no window maps: a launch cursor would spin until it times out
        lines.append(line)
    return "\n".join(lines + ["X-GNOME-Autostart-enabled=true"]) + "\n"


def exec_of(entry: str) -> str | None:
    """The Exec value of a desktop entry's text, as written."""
    for line in entry.splitlines():
        if line.startswith("Exec="):
            return line.removeprefix("Exec=")
    return None
