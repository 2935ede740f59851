"""What the window needs from the system (app/core/desktop/sysdeps): the ELF reader agrees with readelf, the libraries
Qt's xcb plugin loads are all in the .deb's Depends (packaging/deb/depends.txt), the install scripts' check warns with
one apt-get line and never fails, and with one of those libraries really hidden (a private mount namespace binds
/dev/null over it) `nightschool gui` says what, why and the fix instead of Qt's abort, and `nightschool` goes on as
the headless school. The bundle's own derivation is checked against the built bundle in test_bundle.py."""
from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.core.base import paths
from app.core.desktop import sysdeps

ROOT = paths.CODE_ROOT
DEPENDS_TXT = ROOT / "packaging" / "deb" / "depends.txt"
HIDDEN = "libxcb-cursor.so.0"  # Qt 6.5+'s xcb plugin needs it; stock Debian 12 desktops lack it
XCB_MINIMUM = {"libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1", "libxkbcommon-x11-0"}


def checked_in() -> sysdeps.Derived:
    return sysdeps.Derived.parse(DEPENDS_TXT.read_text(encoding="utf-8"))


def xcb_plugin() -> Path:
    qt = sysdeps.qt_folder()
    assert qt is not None and (qt / sysdeps.XCB_PLUGIN).is_file(), "PySide6's xcb platform plugin"
    return qt / sysdeps.XCB_PLUGIN


def test_the_elf_reader_agrees_with_readelf():
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")
    files = sorted((xcb_plugin().parent.parent).rglob("*.so"))[:40] + [xcb_plugin().parents[2] / "lib/libQt6Gui.so.6"]
    for path in files:
        out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
        needed = tuple(re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", out))
        runpath = tuple(p for m in re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r\w*path: \[(.*)\]", out)
                        for p in m.split(":") if p)
        assert sysdeps.read_dynamic(path) == sysdeps.Dynamic(needed, runpath), path
    assert sysdeps.read_dynamic(DEPENDS_TXT) is None  # not ELF


def test_what_the_xcb_plugin_loads_from_the_system_is_in_the_debs_depends():
    """Every system library Qt's window needs maps to a package the .deb depends on, the xcb minimum included."""
    wanted = {name: sysdeps.PACKAGES.get(name) for name in sysdeps.system_libraries(xcb_plugin())}
    assert HIDDEN in wanted and "libxcb-icccm.so.4" in wanted  # read from the plugin, not assumed
    unknown = sorted(n for n, p in wanted.items() if p is None)
    assert unknown == [], f"add these to sysdeps.PACKAGES: {unknown}"
    depends = checked_in().depends
    assert XCB_MINIMUM <= set(depends)
    missing = sorted({p for p in wanted.values() if p} - set(depends))
    assert missing == [], f"{DEPENDS_TXT} lacks {missing}: rebuild and run packaging/depends.py BUNDLE --write"


def test_the_c_library_version_is_what_the_qt_wheels_were_built_for():
    wheel = importlib.metadata.distribution("pyside6_essentials").read_text("WHEEL") or ""
    built_for = max(int(m) for m in re.findall(r"manylinux_2_(\d+)", wheel))
    assert sysdeps.LIBC == f"libc6 (>= 2.{built_for})" and sysdeps.LIBC in checked_in().depends


def test_the_check_runs_only_where_qt_will_load_the_xcb_plugin():
    xcb = sysdeps.platform_is_xcb
    assert xcb({"DISPLAY": ":0"}) and xcb({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb;wayland"})
    assert not xcb({}) and not xcb({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"})
    assert not xcb({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland"})  # wayland first
    assert sysdeps.window_problem({"QT_QPA_PLATFORM": "offscreen"}) is None


def test_the_install_check_warns_with_one_apt_line_and_never_fails(tmp_path):
    if shutil.which("dpkg-query") is None:
        pytest.skip("dpkg is not installed")
    listed = tmp_path / "depends.txt"
    listed.write_text("# a comment\nDepends: libc6 (>= 2.28)\nDepends: nightschool-absent-a\n"
                      "Depends: nightschool-absent-b\nRecommends: nightschool-absent-c\n")
    out = subprocess.run(["bash", str(ROOT / "packaging/check_depends.sh"), str(listed)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "sudo apt-get install nightschool-absent-a nightschool-absent-b\n" in out.stdout  # not libc6, no Recommends
    listed.write_text("Depends: libc6 (>= 2.28)\n")
    out = subprocess.run(["bash", str(ROOT / "packaging/check_depends.sh"), str(listed)], capture_output=True,
                         text=True, timeout=60)
    assert (out.returncode, out.stdout) == (0, "")  # a machine that has them sees nothing new


# ------------------------------------------------------------------------------------ a library really hidden

def library_file(soname: str) -> Path | None:
    """Where the dynamic loader finds this library here (ld.so.cache), the file behind the links; None: absent."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    found = re.search(rf"^\s*{re.escape(soname)} \(.*\) => (\S+)$", out, re.MULTILINE)
    return Path(found.group(1)).resolve() if found else None


def hidden_command(cmd: list[str], soname: str = HIDDEN) -> list[str]:
    """cmd in a private mount namespace where the library is /dev/null (the loader refuses it); a library this
    machine lacks anyway needs no hiding. Skips where a mount namespace cannot be made."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("hiding a library needs Linux, root and unshare (CI has them)")
    real = library_file(soname)
    if real is None:
        return cmd
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here: {probe.stderr.strip()}")
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount --bind /dev/null "$0" && exec "$@"',
            str(real), *cmd]


def window_env(home: Path) -> dict[str, str]:
    """A desktop session's environment on X11 (the test process itself runs offscreen)."""
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    return {**env, "DISPLAY": env.get("DISPLAY") or ":99", "NIGHTSCHOOL_HOME": str(home), "PYTHONUNBUFFERED": "1"}


def assert_explained(out: str) -> None:
    assert "Could not load the Qt platform plugin" not in out and "core dumped" not in out, out
    assert "The window cannot open" in out and HIDDEN in out, out
    assert re.search(r"sudo apt-get install [a-z0-9 .+-]*\blibxcb-cursor0\b", out), out
    assert "nightschool --headless" in out, out


def test_the_window_with_a_hidden_library_says_what_why_and_the_fix(tmp_path):
    done = subprocess.run(hidden_command([sys.executable, "-m", "app.cli.main", "gui"]), cwd=ROOT, timeout=60,
                          env=window_env(tmp_path / "home"), capture_output=True, text=True)
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])  # not SIGABRT (-6 / 134)
    assert_explained(done.stderr)


def test_nightschool_without_its_window_falls_back_to_the_headless_school(tmp_path):
    """`nightschool` says why there is no window and begins the headless run (stopped as soon as it has begun)."""
    proc = subprocess.Popen(hidden_command([sys.executable, "-m", "app.cli.main"]), cwd=ROOT, text=True,
                            env=window_env(tmp_path / "home"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    seen, deadline = [], time.monotonic() + 60
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("Running headless") or time.monotonic() > deadline:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    out = "".join(seen)
    assert seen and seen[-1].startswith("Running headless"), out
    assert_explained(out)
    assert "Going on without a window: the night school runs headless." in out
