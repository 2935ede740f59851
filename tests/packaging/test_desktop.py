"""The XDG desktop integration: `nightschool desktop install` writes entries desktop-file-validate accepts, icons at
every size, a MIME type update-mime-database resolves *.jsonl to; GLib launches the Exec line with the right argv;
uninstall removes exactly what install wrote."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from app.cli.main import main
from app.core.desktop import entries as desktop_entries, install, status, uninstall
from app.core.desktop.installer import is_live

SHARED_MIME = "{http://www.freedesktop.org/standards/shared-mime-info}"


@pytest.fixture(autouse=True)
def xdg(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """XDG_DATA_HOME and XDG_CONFIG_HOME in the test's dir: nothing here ever touches the real ~/.local or ~/.config."""
    data, config = tmp_path / "data", tmp_path / "config-home"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    return data, config


PACKAGES = {"desktop-file-validate": "desktop-file-utils", "update-mime-database": "shared-mime-info",
            "gio": "libglib2.0-bin"}  # the Debian packages that hold the tools


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (Debian/Ubuntu: apt-get install {PACKAGES[name]})")
    return found


def files_under(*roots: Path) -> set[Path]:
    return {p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()}


def validate(*entries: Path) -> None:
    """desktop-file-validate accepts the entries: no error, no warning."""
    done = subprocess.run([tool("desktop-file-validate"), *map(str, entries)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's signature and IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_install_writes_valid_entries_icons_and_the_jsonl_type(tmp_path):
    prefix, config = tmp_path / "share", tmp_path / "config"
    report = install("/usr/bin/nightschool", prefix=prefix, autostart=True, config_home=config, refresh=False)
    launcher, login = prefix / "applications/nightschool.desktop", config / "autostart/nightschool.desktop"
    assert set(report.written) == files_under(prefix, config) and report.autostart == login
    assert len(report.written) == 2 + 1 + len(desktop_entries.PNG_SIZES) + 1  # two entries, the SVG, the PNGs, the MIME package
    validate(launcher, login)
    text = launcher.read_text()
    for line in ("Exec=/usr/bin/nightschool gui %F", "Icon=nightschool", "MimeType=application/jsonl;",
                 "Comment=A small local model learns from your coding agent's work", "Type=Application",
                 "Categories=Development;"):
        assert line in text.splitlines()
    login_lines = login.read_text().splitlines()
    assert "Exec=/usr/bin/nightschool tray --learn" in login_lines  # the tray process (and learning) at login
    assert "X-GNOME-Autostart-enabled=true" in login_lines and not any(x.startswith("MimeType") for x in login_lines)
    svg = prefix / "icons/hicolor/scalable/apps/nightschool.svg"
    assert svg.read_bytes() == desktop_entries.SVG.read_bytes()
    for size in desktop_entries.PNG_SIZES:
        assert png_size(prefix / f"icons/hicolor/{size}x{size}/apps/nightschool.png") == (size, size)
    mime = ET.parse(prefix / "mime/packages/nightschool.xml").getroot()
    jsonl = mime.find(f"{SHARED_MIME}mime-type")
    assert jsonl.get("type") == "application/jsonl"
    assert jsonl.find(f"{SHARED_MIME}glob").get("pattern") == "*.jsonl"
    assert jsonl.find(f"{SHARED_MIME}sub-class-of").get("type") == "text/plain"
    assert jsonl.find(f"{SHARED_MIME}comment").text == "JSON Lines data"
    st = status(prefix, config)
    assert st.complete and st.launcher and st.autostart == login and st.exec == "/usr/bin/nightschool gui %F"


def test_the_committed_pngs_are_the_sizes_they_are_named():
    for size in desktop_entries.PNG_SIZES:
        assert png_size(desktop_entries.PNG_DIR / f"{size}.png") == (size, size)


def test_uninstall_removes_exactly_what_install_wrote(tmp_path):
    prefix, config = tmp_path / "share", tmp_path / "config"
    theirs = [prefix / "applications/other.desktop", prefix / "icons/hicolor/48x48/apps/other.png",
              prefix / "mime/packages/other.xml", config / "autostart/other.desktop"]
    for path in theirs:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("someone else's")
    before = files_under(prefix, config)
    written = install("/usr/bin/nightschool", prefix=prefix, autostart=True, config_home=config, refresh=False).written
    assert files_under(prefix, config) == before | set(written)
    report = uninstall(prefix, config, refresh=False)
    assert set(report.removed) == set(written) and report.absent == []
    assert files_under(prefix, config) == before
    assert all(p.read_text() == "someone else's" for p in theirs)
    again = uninstall(prefix, config, refresh=False)
    assert again.removed == [] and set(again.absent) == set(written)
    assert not status(prefix, config).present


def test_glib_launches_the_exec_line_with_the_path_and_file_it_was_given(tmp_path):
    """A program under a folder with a space, $, `, ", \\ and ' in its name: the quoted Exec runs it with `gui FILE`
    (GLib's gio parses the entry as desktops do), and the login entry with `tray --learn`."""
    gio = tool("gio")
    folder = tmp_path / "My Apps $HOME `id` \"q\" back\\slash it's"
    folder.mkdir()
    out = tmp_path / "argv.txt"
    program = folder / "nightschool"
    program.write_text(f'#!/bin/sh\nprintf "%s\\n" "$0" "$@" > "{out}.tmp" && mv "{out}.tmp" "{out}"\n')
    program.chmod(0o755)
    prefix, config = tmp_path / "share", tmp_path / "config"
    install(str(program), prefix=prefix, autostart=True, config_home=config, refresh=False)
    launcher, login = prefix / "applications/nightschool.desktop", config / "autostart/nightschool.desktop"
    validate(launcher, login)
    data = tmp_path / "chat.jsonl"
    assert launched(gio, launcher, out, str(data)) == [str(program), "gui", str(data)]
    assert launched(gio, login, out) == [str(program), "tray", "--learn"]


def launched(gio: str, entry: Path, out: Path, *args: str, timeout_s: float = 20.0) -> list[str]:
    """Launch a desktop entry with gio and return the argv its program wrote (gio returns once it has spawned)."""
    out.unlink(missing_ok=True)
    done = subprocess.run([gio, "launch", str(entry), *args], capture_output=True, text=True, timeout=timeout_s,
                          check=False)
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + timeout_s
    while not out.exists():
        assert time.monotonic() < deadline, f"the program of {entry} did not run"
        time.sleep(0.05)
    return out.read_text().splitlines()


def test_exec_quoting_follows_the_desktop_entry_spec():
    assert desktop_entries.exec_value(["/usr/bin/nightschool"]) == "/usr/bin/nightschool"
    assert desktop_entries.exec_value(["/opt/My Apps/nightschool"]) == '"/opt/My Apps/nightschool"'
    assert desktop_entries.exec_value(["/opt/100%/ns"]) == "/opt/100%%/ns"  # a literal % is doubled (field codes)
    assert desktop_entries.exec_value(['/o/"a"$b']) == '"/o/\\\\"a\\\\"\\\\$b"'  # quoted-arg escapes, then the string escapes


def test_the_default_command_is_the_running_nightschool():
    argv, workdir = desktop_entries.default_command()
    script = Path(sys.executable).with_name("nightschool")
    if script.is_file() and os.access(script, os.X_OK):
        assert (argv, workdir) == ([str(script)], None)
    else:
        assert argv == [sys.executable, "-m", "app.cli.main"] and workdir is not None
    text = desktop_entries.launcher_text(argv, workdir)
    assert f"Exec={desktop_entries.exec_value(argv)} gui %F" in text.splitlines()


def test_update_mime_database_resolves_jsonl_in_the_data_home(xdg):
    """Installed where the desktop reads ($XDG_DATA_HOME, the default prefix) the caches are refreshed: globs2 maps
    *.jsonl to application/jsonl."""
    tool("update-mime-database")
    data, _config = xdg
    report = install("/usr/bin/nightschool")
    assert report.prefix == data and report.live
    assert f"update-mime-database {data / 'mime'}" in report.refreshed
    globs = (data / "mime/globs2").read_text().splitlines()
    assert any(line.split(":")[1:] == ["application/jsonl", "*.jsonl"] for line in globs), globs
    assert (data / "mime/application/jsonl.xml").is_file()
    uninstall()
    assert not (data / "mime/application/jsonl.xml").exists()  # the database was rebuilt without the type


def test_a_staging_root_is_not_refreshed(tmp_path):
    stage = tmp_path / "pkg" / "usr" / "share"
    assert not is_live(stage)
    report = install("/usr/bin/nightschool", prefix=stage)
    assert report.refreshed == [] and "staging root" in report.skipped[0] and not report.live
    assert not (stage / "mime/globs2").exists() and not (stage / "icons/hicolor/icon-theme.cache").exists()


def test_cli_install_status_uninstall_as_json(tmp_path, capsys, xdg):
    _data, config = xdg
    stage = tmp_path / "stage" / "usr" / "share"
    common = ["--prefix", str(stage)]
    assert main(["desktop", "install", *common, "--exec", "/usr/bin/nightschool", "--no-refresh", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["exec"] == "/usr/bin/nightschool" and report["prefix"] == str(stage) and report["autostart"] is None
    assert sorted(report["written"]) == sorted(str(p) for p in files_under(stage)) and len(report["written"]) == 10
    assert report["refreshed"] == [] and "--no-refresh" in report["skipped"][0]
    assert main(["desktop", "status", *common, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["complete"] and st["missing"] == [] and st["exec"] == "/usr/bin/nightschool gui %F"
    assert main(["desktop", "uninstall", *common, "--json"]) == 0
    gone = json.loads(capsys.readouterr().out)
    assert sorted(gone["removed"]) == sorted(report["written"]) and files_under(stage) == set()
    assert gone["absent"] == [str(config / "autostart/nightschool.desktop")]


def test_cli_install_says_the_files_it_wrote(tmp_path, capsys, xdg):
    _data, config = xdg
    stage = tmp_path / "stage"
    assert main(["desktop", "install", "--prefix", str(stage), "--exec", "/usr/bin/nightschool", "--autostart"]) == 0
    said = capsys.readouterr().out
    for path in files_under(stage, config):
        assert f"  {path}\n" in said
    assert "wrote 11 files" in said and "staged under" in said and "at login Nightschool starts in the tray" in said
    assert main(["desktop", "status", "--prefix", str(tmp_path / "empty")]) == 0
    assert "not installed under" in capsys.readouterr().out


def test_cli_refuses_an_empty_exec(tmp_path, capsys):
    assert main(["desktop", "install", "--prefix", str(tmp_path / "s"), "--exec", " "]) == 2
    err = capsys.readouterr().err
    assert "No command to put in the launcher" in err and "--exec /usr/bin/nightschool" in err
    assert not (tmp_path / "s").exists()


def test_the_entries_exec_lines_parse_as_gui_commands():
    from app.cli.main import build_parser, cmd_gui

    launched = build_parser().parse_args(["gui", "/home/me/a.jsonl", "/home/me/b.jsonl"])
    assert launched.func is cmd_gui and launched.files == ["/home/me/a.jsonl", "/home/me/b.jsonl"]
    assert not launched.minimized
    login = build_parser().parse_args(["tray", "--learn"])
    assert login.func.__name__ == "cmd_tray" and login.learn
    earlier = build_parser().parse_args(["gui", "--minimized"])  # earlier installs' login entry: the same tray
    assert earlier.minimized and earlier.files == []
