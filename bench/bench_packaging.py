"""Packaging figures: build time and sizes (bundle, .deb, tar.gz), cold start to the first window of the frozen app
vs the pip-installed one (under Xvfb, the window seen by the X server), and the engine set-up with warm caches.
Usage: .venv/bin/python bench/bench_packaging.py [--runs 5] [--skip-build] [--skip-setup]"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO / "build/package/dist/nightschool/nightschool"


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) if path.is_dir() \
        else path.stat().st_size


def build(out: Path) -> float:
    started = time.monotonic()
    subprocess.run(["bash", "packaging/build.sh", str(out)], cwd=REPO, check=True, capture_output=True)
    return time.monotonic() - started


def first_window(command: list[str], display: str) -> float:
    """Seconds from exec to a mapped top-level window named Nightschool (on a fresh data dir)."""
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "DISPLAY": display, "NIGHTSCHOOL_HOME": home, "NIGHTSCHOOL_NO_FIRST_RUN": "1",
               "QT_QPA_PLATFORM": "xcb"}
        env.pop("NIGHTSCHOOL_ENGINE_PYTHON", None)
        started = time.monotonic()
        err = Path(home) / "stderr.txt"
        proc = subprocess.Popen([*command, "gui"], env=env, stdout=subprocess.DEVNULL, stderr=err.open("wb"))
        try:
            while proc.poll() is None:  # polling the X server: the app under test has no hook to call
                seen = subprocess.run(["xwininfo", "-name", "Nightschool"], env=env, capture_output=True, text=True)
                if seen.returncode == 0 and "IsViewable" in seen.stdout:
                    return time.monotonic() - started
            raise RuntimeError(f"{command} exited ({proc.returncode}) before showing a window: {err.read_text()[-1500:]}")
        finally:
            proc.kill()
            proc.wait()


def engine_setup() -> float:
    """A fresh engine environment from warm caches (pip's cache, the kept llama-cpp-python wheel)."""
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "NIGHTSCHOOL_HOME": home}
        env.pop("NIGHTSCHOOL_ENGINE_PYTHON", None)
        started = time.monotonic()
        subprocess.run([str(BUNDLE), "engine", "setup"], env=env, check=True, capture_output=True)
        return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--skip-setup", action="store_true")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    out = Path(tempfile.mkdtemp(prefix="ns-bench-dist-"))
    if not args.skip_build:
        print(f"build (bundle + .deb + tar.gz): {build(out):.0f} s")
        for f in sorted(out.iterdir()):
            print(f"  {f.name}: {du(f) / 1e6:.0f} MB")
    print(f"bundle: {du(BUNDLE.parent) / 1e6:.0f} MB")
    # -displayfd: Xvfb picks a free display and writes its number; -noreset: no server reset as each app quits
    xlog = out / "xvfb.log"
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", "1", "-noreset", "-screen", "0", "1280x900x24"], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, stderr=xlog.open("wb"), text=True)
    try:
        display = f":{xvfb.stdout.readline().strip()}"
        while subprocess.run(["xwininfo", "-root", "-display", display], capture_output=True).returncode != 0:
            time.sleep(0.05)  # the number is written a moment before every client is accepted
        frozen = [first_window([str(BUNDLE)], display) for _ in range(args.runs)]
        pip = [first_window([str(REPO / ".venv/bin/nightschool")], display) for _ in range(args.runs)]
    finally:
        xvfb.terminate()
        xvfb.wait()
    fm, pm = statistics.median(frozen), statistics.median(pip)
    print(f"cold start to first window, median of {args.runs}: frozen {fm:.2f} s, pip-installed {pm:.2f} s "
          f"(frozen/pip {fm / pm:.2f}); all frozen {[round(x, 2) for x in frozen]}, pip {[round(x, 2) for x in pip]}")
    if not args.skip_setup:
        print(f"engine set-up, fresh environment, warm caches: {engine_setup():.0f} s")
    shutil.rmtree(out, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
