"""Where the desktop files go (an XDG data prefix and the autostart folder), and install / uninstall / status of them,
with the desktop's caches refreshed best-effort."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import platformdirs

from app.core.base.errors import Explained
from app.core.base.files import atomic_write
from app.core.desktop import entries

LAUNCHER = Path("applications") / f"{entries.APP_ID}.desktop"
SCALABLE = Path("icons/hicolor/scalable/apps") / f"{entries.APP_ID}.svg"
MIME_PACKAGE = Path("mime/packages") / f"{entries.APP_ID}.xml"
REFRESH_TIMEOUT_S = 60


def png_path(size: int) -> Path:
    return Path(f"icons/hicolor/{size}x{size}/apps/{entries.APP_ID}.png")


def data_home() -> Path:
    """$XDG_DATA_HOME or ~/.local/share (platformdirs)."""
    return Path(platformdirs.user_data_dir())


def config_home() -> Path:
    """$XDG_CONFIG_HOME or ~/.config (platformdirs)."""
    return Path(platformdirs.user_config_dir())


def autostart_path(config: Path | None = None) -> Path:
    return (config or config_home()) / "autostart" / f"{entries.APP_ID}.desktop"


def prefix_files(prefix: Path) -> list[Path]:
    """Every file install writes under the prefix (the same list uninstall removes)."""
    relative = [LAUNCHER, SCALABLE, *(png_path(n) for n in entries.PNG_SIZES), MIME_PACKAGE]
    return [prefix / p for p in relative]


def _sources(prefix: Path) -> dict[Path, Path]:
    """target -> the resource it is a copy of (the icons)."""
    found = {prefix / SCALABLE: entries.SVG, **{prefix / png_path(n): entries.PNG_DIR / f"{n}.png" for n in entries.PNG_SIZES}}
    missing = [str(src) for src in found.values() if not src.is_file()]
    if missing:
        raise Explained(f"Icon files are missing: {', '.join(missing)}", "they ship in Nightschool's resources/",
                        "reinstall Nightschool, or in a checkout run packaging/make_icons.py")
    return found


@dataclass
class InstallReport:
    prefix: Path
    exec: str  # the command part of the Exec key, as written
    live: bool = True  # the desktop reads the prefix (False: a staging root)
    written: list[Path] = field(default_factory=list)
    autostart: Path | None = None
    refreshed: list[str] = field(default_factory=list)  # the cache commands that ran
    skipped: list[str] = field(default_factory=list)  # why a cache was not refreshed

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class UninstallReport:
    prefix: Path
    removed: list[Path] = field(default_factory=list)
    absent: list[Path] = field(default_factory=list)  # files install writes that were not there
    refreshed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class DesktopStatus:
    prefix: Path
    launcher: bool  # the applications menu entry is there
    complete: bool  # every file install writes under the prefix is there
    present: list[Path]
    missing: list[Path]
    autostart: Path | None  # the login entry, when there is one
    exec: str | None  # the installed launcher's Exec value

    def to_dict(self) -> dict:
        return asdict(self)


def default_prefix() -> Path:
    """$XDG_DATA_HOME or ~/.local/share; refused where the desktop is not an XDG one (macOS, Windows)."""
    if sys.platform in ("darwin", "win32"):
        raise Explained("There is no XDG desktop to add a launcher to", f"this is {sys.platform}: launchers are "
                        "Linux and BSD desktop files", "pass --prefix DIR to write the files somewhere anyway")
    return data_home()


def install(exec_cmd: str | Sequence[str] | None = None, prefix: Path | None = None, autostart: bool = False,
            config_home: Path | None = None, refresh: bool = True) -> InstallReport:
    """Write the launcher, its icons and the *.jsonl MIME type under the prefix (and the login entry when autostart),
    then refresh the desktop's caches. exec_cmd: the program path (or an argv); None: the running nightschool."""
    prefix = Path(prefix) if prefix is not None else default_prefix()
    argv, workdir = entries.command_argv(exec_cmd)
    launcher = entries.launcher_text(argv, workdir)
    report = InstallReport(prefix=prefix, exec=entries.exec_value(argv), live=is_live(prefix))
    texts = {prefix / LAUNCHER: launcher, prefix / MIME_PACKAGE: entries.MIME_XML}
    for target, source in _sources(prefix).items():
        _write(target, source.read_bytes(), report.written)
    for target, text in texts.items():
        _write(target, text, report.written)
    if autostart:
        report.autostart = autostart_path(config_home)
        _write(report.autostart, entries.autostart_text(launcher), report.written)
    report.written.sort()
    report.refreshed, report.skipped = refresh_caches(prefix, refresh)
    return report


def _write(target: Path, data: str | bytes, written: list[Path]) -> None:
    try:
        atomic_write(target, data, mode=0o644)
    except OSError as exc:
        raise Explained(f"Could not write {target}", exc.strerror or str(exc),
                        "choose a --prefix you may write to (system-wide /usr/share needs root)") from exc
    written.append(target)


def uninstall(prefix: Path | None = None, config_home: Path | None = None, refresh: bool = True) -> UninstallReport:
    """Remove the files install writes (and the login entry); folders and everything else stay."""
    prefix = Path(prefix) if prefix is not None else default_prefix()
    report = UninstallReport(prefix=prefix)
    for path in [*prefix_files(prefix), autostart_path(config_home)]:
        try:
            path.unlink()
        except FileNotFoundError:
            report.absent.append(path)
            continue
        except OSError as exc:
            raise Explained(f"Could not remove {path}", exc.strerror or str(exc),
                            "run the uninstall as the user who may write there") from exc
        report.removed.append(path)
    if report.removed:
        report.refreshed, report.skipped = refresh_caches(prefix, refresh)
    return report


def status(prefix: Path | None = None, config_home: Path | None = None) -> DesktopStatus:
    """Which of install's files are there, whether the login entry is, and the installed launcher's command."""
    prefix = Path(prefix) if prefix is not None else default_prefix()
    files = prefix_files(prefix)
    missing = [p for p in files if not p.is_file()]
    entry = prefix / LAUNCHER
    login = autostart_path(config_home)
    exec_line = entries.exec_of(entry.read_text(encoding="utf-8", errors="replace")) if entry.is_file() else None
    return DesktopStatus(prefix=prefix, launcher=entry.is_file(), complete=not missing,
                         present=[p for p in files if p not in missing], missing=missing,
                         autostart=login if login.is_file() else None, exec=exec_line)


# --- the desktop's caches ------------------------------------------------------------------------------
def is_live(prefix: Path) -> bool:
    """Whether the desktop reads this prefix ($XDG_DATA_HOME or one of $XDG_DATA_DIRS); else it is a staging root."""
    dirs = platformdirs.site_data_dir(multipath=True).split(os.pathsep)
    read = {data_home(), *(Path(d) for d in dirs if os.path.isabs(d))}
    return prefix.resolve() in {d.resolve() for d in read}


def cache_commands(prefix: Path) -> list[list[str]]:
    return [["update-desktop-database", str(prefix / "applications")],
            ["update-mime-database", str(prefix / "mime")],
            ["gtk-update-icon-cache", "-f", "-t", str(prefix / "icons" / "hicolor")]]


def refresh_caches(prefix: Path, refresh: bool = True) -> tuple[list[str], list[str]]:
    """Run the cache tools that exist; never fails. Returns (commands run, reasons for those not run)."""
    if not refresh:
        return [], ["caches not refreshed: asked not to (--no-refresh)"]
    if not is_live(prefix):
        return [], [f"caches not refreshed: {prefix} is not a folder the desktop reads ($XDG_DATA_HOME, "
                    + "$XDG_DATA_DIRS), so it is taken for a staging root"]
    ran, skipped = [], []
    for argv in cache_commands(prefix):
        exe = shutil.which(argv[0])
        if exe is None:
            skipped.append(f"{argv[0]} is not installed: its cache was not refreshed")
            continue
        try:
            done = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, check=False,
                                  timeout=REFRESH_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            skipped.append(f"{argv[0]} did not run: {exc}")
            continue
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            skipped.append(f"{shlex.join(argv)} failed: {said[-1] if said else f'exit {done.returncode}'}")
            continue
        ran.append(shlex.join(argv))
    return ran, skipped
