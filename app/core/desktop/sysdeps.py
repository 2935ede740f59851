"""What the window needs from the system: the shared libraries Qt's xcb platform plugin loads (checked before a
QApplication exists, because Qt aborts the process when no platform plugin loads), the Debian package of each
library the app does not carry, and the package list the .deb declares, derived from a built bundle.

One table (`PACKAGES`, soname → Debian package) serves the start-up check's fix line, the .deb's `Depends:`
(`packaging/deb/depends.txt`, written by `derive_depends` and compared with the bundle by tests/packaging) and the
PyInstaller spec, which never bundles a library named here (the system's copy, matched to its drivers, is used).
ELF files are read in plain Python (`elf.read_dynamic`): user machines need no binutils, and a check costs milliseconds."""
from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from app.core.base.errors import Explained
from app.core.desktop.elf import Dynamic, read_dynamic, runpath_dirs

LIBC = "libc6 (>= 2.34)"  # PySide6 6.12's wheels are manylinux_2_34 (tests/packaging/test_sysdeps checks)
# Debian 12 names; Debian 13's renamed packages (…t64) provide these names, so the same Depends install there.
PACKAGES: dict[str, str] = {
    # the C library and the compiler runtime (never bundled by PyInstaller)
    "libc.so.6": LIBC, "libm.so.6": LIBC, "libdl.so.2": LIBC, "libpthread.so.0": LIBC, "librt.so.1": LIBC,
    "libutil.so.1": LIBC, "libresolv.so.2": LIBC, "ld-linux-x86-64.so.2": LIBC, "ld-linux-aarch64.so.1": LIBC,
    "libcrypt.so.1": "libcrypt1",
    "libstdc++.so.6": "libstdc++6", "libgcc_s.so.1": "libgcc-s1",
    # X11 and xcb: Qt's xcb platform plugin (Qt 6.5+ needs xcb-cursor)
    "libxcb.so.1": "libxcb1", "libxcb-cursor.so.0": "libxcb-cursor0", "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0", "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0", "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-render.so.0": "libxcb-render0", "libxcb-shape.so.0": "libxcb-shape0", "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1", "libxcb-xfixes.so.0": "libxcb-xfixes0", "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb-util.so.1": "libxcb-util1", "libxcb-glx.so.0": "libxcb-glx0", "libxcb-xinput.so.0": "libxcb-xinput0",
    "libxcb-dri2.so.0": "libxcb-dri2-0", "libxcb-dri3.so.0": "libxcb-dri3-0", "libxcb-present.so.0": "libxcb-present0",
    "libX11.so.6": "libx11-6", "libX11-xcb.so.1": "libx11-xcb1", "libXext.so.6": "libxext6",
    "libXrender.so.1": "libxrender1", "libXi.so.6": "libxi6", "libXfixes.so.3": "libxfixes3",
    "libXrandr.so.2": "libxrandr2", "libXcursor.so.1": "libxcursor1", "libXinerama.so.1": "libxinerama1",
    "libXcomposite.so.1": "libxcomposite1", "libXdamage.so.1": "libxdamage1", "libXau.so.6": "libxau6",
    "libXdmcp.so.6": "libxdmcp6", "libSM.so.6": "libsm6", "libICE.so.6": "libice6",
    "libxkbcommon.so.0": "libxkbcommon0", "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    # OpenGL / EGL / Vulkan / DRM: the system's, matched to its drivers
    "libGL.so.1": "libgl1", "libEGL.so.1": "libegl1", "libOpenGL.so.0": "libopengl0", "libGLX.so.0": "libglx0",
    "libGLESv2.so.2": "libgles2", "libgbm.so.1": "libgbm1", "libdrm.so.2": "libdrm2", "libvulkan.so.1": "libvulkan1",
    "libinput.so.10": "libinput10", "libudev.so.1": "libudev1", "libmtdev.so.1": "libmtdev1",
    "libwayland-client.so.0": "libwayland-client0", "libwayland-cursor.so.0": "libwayland-cursor0",
    "libwayland-egl.so.1": "libwayland-egl1", "libwayland-server.so.0": "libwayland-server0",
    # fonts, text, desktop services
    "libfontconfig.so.1": "libfontconfig1", "libfreetype.so.6": "libfreetype6", "libharfbuzz.so.0": "libharfbuzz0b",
    "libglib-2.0.so.0": "libglib2.0-0", "libgthread-2.0.so.0": "libglib2.0-0", "libgobject-2.0.so.0": "libglib2.0-0",
    "libgio-2.0.so.0": "libglib2.0-0", "libgmodule-2.0.so.0": "libglib2.0-0", "libdbus-1.so.3": "libdbus-1-3",
    "libgtk-3.so.0": "libgtk-3-0", "libgdk-3.so.0": "libgtk-3-0", "libpango-1.0.so.0": "libpango-1.0-0",
    "libcairo.so.2": "libcairo2", "libcairo-gobject.so.2": "libcairo2", "libgdk_pixbuf-2.0.so.0": "libgdk-pixbuf-2.0-0",
    "libatk-1.0.so.0": "libatk1.0-0", "libcups.so.2": "libcups2", "libasound.so.2": "libasound2",
    "libpulse.so.0": "libpulse0", "libpulse-mainloop-glib.so.0": "libpulse-mainloop-glib0",
    "libgssapi_krb5.so.2": "libgssapi-krb5-2", "libpng16.so.16": "libpng16-16", "libexpat.so.1": "libexpat1",
    "libz.so.1": "zlib1g", "libzstd.so.1": "libzstd1", "libbrotlidec.so.1": "libbrotli1", "libbrotlicommon.so.1": "libbrotli1",
}
# what Qt's platform plugin and the window's core libraries load from the system, to say in a fix line
XCB_PLUGIN = Path("Qt") / "plugins" / "platforms" / "libqxcb.so"
_CANNOT = re.compile(r"^(?:.*/)?([^/:\s]+\.so[.\d]*): ")


def apt_line(packages: Iterable[str]) -> str:
    """The one command that installs these packages (their version constraints dropped), in a stable order."""
    names = sorted({p.split(" ", 1)[0] for p in packages})
    return "sudo apt-get install " + " ".join(names)


# ---------------------------------------------------------------------------------------- the .deb's Depends

# Qt plugins the app cannot do without; the others are optional (Qt skips one whose libraries are missing), so what
# only they need is recommended, not required (e.g. the GTK theme plugin's libgtk-3).
REQUIRED_PLUGINS = ("platforms/libqxcb.so", "platforms/libqoffscreen.so", "platforms/libqminimal.so",
                    "imageformats/", "iconengines/")
PLUGINS = "PySide6/Qt/plugins/"


class UnknownLibraries(Explained):
    """Libraries the bundle needs from the system that the table does not name a package for."""


@dataclass(frozen=True)
class Derived:
    """What a bundle needs from the system, as Debian packages: `depends` to run, `recommends` for optional
    plugins only."""
    depends: tuple[str, ...]
    recommends: tuple[str, ...]

    def text(self) -> str:
        """packaging/deb/depends.txt: one `Depends: PKG` / `Recommends: PKG` line each."""
        return (DEPENDS_HEADER + "".join(f"Depends: {p}\n" for p in self.depends)
                + "".join(f"Recommends: {p}\n" for p in self.recommends))

    def diff(self, other: Derived) -> list[str]:
        """'- LINE' for each line of self that other lacks, '+ LINE' for each it adds."""
        before, after = set(self.text().splitlines()), set(other.text().splitlines())
        return [f"- {x}" for x in sorted(before - after)] + [f"+ {x}" for x in sorted(after - before)]

    @classmethod
    def parse(cls, text: str) -> Derived:
        lines = [line.split(":", 1) for line in text.splitlines() if line.strip() and not line.startswith("#")]
        return cls(tuple(v.strip() for k, v in lines if k == "Depends"),
                   tuple(v.strip() for k, v in lines if k == "Recommends"))


DEPENDS_HEADER = """# What the packaged app needs from the system, as Debian packages: derived from the built bundle (every shared
# object's NEEDED libraries it does not carry, mapped by app/core/desktop/sysdeps.PACKAGES). packaging/build.sh writes
# these into the .deb's control file; install.sh (portable and source) check the Depends. Regenerate after a change
# to the bundle: .venv/bin/python packaging/depends.py build/package/dist/nightschool --write
"""


def elf_files(bundle: Path) -> list[Path]:
    """Every ELF shared object or executable in a folder (regular files, not links)."""
    found = []
    for path in sorted(bundle.rglob("*")):
        if path.is_file() and not path.is_symlink() and (".so" in path.name or os.access(path, os.X_OK)):
            with open(path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    found.append(path)
    return found


def _is_root(rel: str) -> bool:
    """Loaded by the app itself: the executable, Python's extension modules and libpython, the required plugins
    (the libraries the bundle carries count only when one of these reaches them)."""
    name = rel.rsplit("/", 1)[-1]
    if PLUGINS in rel:
        return rel.split(PLUGINS, 1)[1].startswith(REQUIRED_PLUGINS)
    return ".so" not in name or ".cpython-" in name or ".abi3.so" in name or name.startswith("libpython")


def derive_depends(bundle: Path, table: Mapping[str, str] = PACKAGES, which=None) -> Derived:
    """The Debian packages a bundle needs from the system: each NEEDED library that no file of the bundle is, mapped
    by the table; what the app's own code reaches is a Depends, what only optional plugins reach a Recommends. A
    library the table does not know is refused with the files that need it (and what `which`, e.g. `dpkg -S`, says
    ships it here), so the table is completed rather than guessed around."""
    files = elf_files(bundle)
    carried = {p.name: p for p in sorted(bundle.rglob("*.so*"), key=lambda p: len(p.parts)) if p.is_file()}
    dynamic = {path: read_dynamic(path) or Dynamic((), ()) for path in files}
    required, todo = set(), [p for p in files if _is_root(p.relative_to(bundle).as_posix())]
    while todo:
        path = todo.pop()
        if path not in required:
            required.add(path)
            todo.extend(carried[n] for n in dynamic.get(path, Dynamic((), ())).needed if n in carried)
    needs: dict[str, list[str]] = {}
    for path in sorted(files, key=lambda p: p not in required):  # required files first: they name the need
        for name in dynamic[path].needed:
            if name not in carried:
                needs.setdefault(name, []).append(path.relative_to(bundle).as_posix())
    unknown = sorted(n for n in needs if n not in table)
    if unknown:
        lines = [f"{n} (needed by {needs[n][0]}{' …' if len(needs[n]) > 1 else ''}"
                 f"{'; here in ' + found if which and (found := which(n)) else ''})" for n in unknown]
        raise UnknownLibraries("The bundle needs libraries that app/core/desktop/sysdeps.PACKAGES names no "
                               "Debian package for: " + ", ".join(lines),
                               "the .deb's Depends are derived from that table",
                               "add each to the table with the package that ships it (`dpkg -S NAME`)")
    by_required = {n for path in required for n in dynamic[path].needed if n in needs}
    depends = sorted({table[n] for n in by_required})
    recommends = sorted({table[n] for n in needs if n not in by_required} - set(depends))
    return Derived(tuple(depends), tuple(recommends))


# ------------------------------------------------------------------------------------- the start-up check

class WindowLibrariesMissing(Explained):
    """Qt's platform plugin cannot load: system libraries it needs are missing. `packages` fix it."""

    def __init__(self, missing: Mapping[str, str | None]) -> None:
        self.missing = dict(missing)
        self.packages = sorted({p.split(" ", 1)[0] for p in self.missing.values() if p})
        unnamed = sorted(n for n, p in self.missing.items() if not p)
        fixes = [f"`{apt_line(self.packages)}`"] if self.packages else []
        fixes += [f"install the package that provides {n}" for n in unnamed]
        super().__init__("The window cannot open: Qt's X11 platform plugin (xcb) cannot load",
                         "this system lacks " + ", ".join(sorted(self.missing)) + ", which it needs",
                         "fix: " + " and ".join(fixes) + " (or start without a window: nightschool --headless)")


def platform_is_xcb(env: Mapping[str, str]) -> bool:
    """Whether Qt will load its xcb platform plugin: Linux with an X display, unless QT_QPA_PLATFORM names another
    plugin first or a Wayland session runs (Qt 6.5+ tries wayland first there)."""
    if not sys.platform.startswith("linux"):
        return False
    chosen = env.get("QT_QPA_PLATFORM", "").split(";")[0].split(":")[0].strip()
    if chosen:
        return chosen == "xcb"
    if env.get("WAYLAND_DISPLAY") and env.get("XDG_SESSION_TYPE") == "wayland":
        return False
    return bool(env.get("DISPLAY"))


def qt_folder() -> Path | None:
    """PySide6's folder (in the venv, or in the bundle) without importing Qt."""
    try:
        spec = importlib.util.find_spec("PySide6")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def _loads(name: str) -> str | None:
    """None when the dynamic loader can load this library (and what it needs); else the soname that failed."""
    try:
        ctypes.CDLL(name, mode=os.RTLD_LAZY | os.RTLD_LOCAL)
    except OSError as exc:
        match = _CANNOT.match(str(exc))
        return match.group(1) if match else name
    return None


def system_libraries(plugin: Path) -> list[str]:
    """The libraries this plugin loads from the system: NEEDED names followed through the libraries its runpaths
    carry (Qt's own), in the order met."""
    found: list[str] = []
    seen: set[str] = set()
    todo = [plugin]
    while todo:
        path = todo.pop(0)
        dyn = read_dynamic(path)
        if dyn is None:
            continue
        dirs = runpath_dirs(path, dyn)
        for name in dyn.needed:
            if name not in seen:
                seen.add(name)
                carried = next((d / name for d in dirs if (d / name).is_file()), None)
                if carried is not None:
                    todo.append(carried)
                else:
                    found.append(name)
    return found


def missing_for(plugin: Path, table: Mapping[str, str] = PACKAGES) -> dict[str, str | None]:
    """soname → package (None: the table does not know it) of each system library this plugin needs that the
    dynamic loader cannot load, asked as Qt will ask it (so a library present but broken counts as missing too)."""
    failed = (_loads(name) for name in system_libraries(plugin))
    return {name: table.get(name) for name in failed if name is not None}


def window_problem(env: Mapping[str, str] | None = None) -> WindowLibrariesMissing | None:
    """Before a QApplication exists: why the window could not open (the libraries the xcb plugin lacks), or None
    (nothing missing, another platform plugin, or no PySide6 to check)."""
    env = os.environ if env is None else env
    if not platform_is_xcb(env):
        return None
    qt = qt_folder()
    if qt is None or not (qt / XCB_PLUGIN).is_file():
        return None
    missing = missing_for(qt / XCB_PLUGIN)
    return WindowLibrariesMissing(missing) if missing else None
