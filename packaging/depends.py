"""What a built bundle needs from the system, as Debian packages (app/core/desktop/sysdeps.derive_depends), against
the checked-in packaging/deb/depends.txt that build.sh writes into the .deb.

Usage: .venv/bin/python packaging/depends.py BUNDLE [--write]
  without --write: print the derived lines and, when they differ from depends.txt, what changed (exit 1)
  --write:         update depends.txt (after a change to the bundle; commit it)"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from app.core.desktop.sysdeps import Derived, UnknownLibraries, derive_depends

DEPENDS = Path(__file__).resolve().parent / "deb" / "depends.txt"


def dpkg_which(soname: str) -> str:
    """The package that ships this library on the build machine ('' where dpkg cannot say)."""
    if shutil.which("dpkg") is None:
        return ""
    done = subprocess.run(["dpkg", "-S", f"*/{soname}"], capture_output=True, text=True)
    return done.stdout.split(":", 1)[0] if done.returncode == 0 else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--write", action="store_true", help=f"update {DEPENDS.name}")
    args = parser.parse_args(argv)
    try:
        derived = derive_depends(args.bundle, which=dpkg_which)
    except UnknownLibraries as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.write:
        DEPENDS.write_text(derived.text(), encoding="utf-8")
        print(f"wrote {DEPENDS}")
        return 0
    print(derived.text(), end="")
    diff = Derived.parse(DEPENDS.read_text(encoding="utf-8")).diff(derived)
    if diff:
        print(f"\n{DEPENDS} is out of date (update it: --write):\n  " + "\n  ".join(diff), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
