"""The remote side of a Ray/SkyPilot job: `python -m engine.train.remote_entry --spec spec.json` puts the staged
dataset in the remote run dir, runs the same `python -m engine --spec spec.json`, prints each engine event as an
`NSEV <json>` line (the log is the event channel home) and forwards control files to the engine's socket."""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from app.core.train.backends.remote import CONTROL_DIR, EVENT_PREFIX, EXIT_PREFIX
from app.core.train.spec import JobSpec

POLL_S = 0.2


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _place(staged: Path, target: Path, sha: str | None) -> None:
    """Copy a staged snapshot into the run dir unless an identical one is there (a resumed attempt)."""
    if target.is_file() and (sha is None or _sha(target) == sha):
        return
    shutil.copy2(staged, target)


def _pythonpath() -> str:
    """The folders holding the `app` and `engine` packages this wrapper was given (Ray py_modules or a checkout)."""
    import importlib.util

    roots = {str(Path(importlib.util.find_spec(n).origin).parents[1]) for n in ("app", "engine")}
    return os.pathsep.join([*sorted(roots), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


class Tail:
    """Prints new complete lines of the engine's events.jsonl, from where this attempt started."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.is_file() else 0

    def pump(self) -> None:
        if not self.path.is_file():
            return
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        if end:
            for line in data[:end].decode("utf-8", errors="replace").splitlines():
                print(EVENT_PREFIX + line, flush=True)
            self.offset += end


def _forward_controls(spec: JobSpec, folder: Path) -> None:
    from app.core.queue.control import EngineUnreachable, send_command

    for cmd in sorted(folder.glob("*.cmd")) if folder.is_dir() else []:
        command = cmd.read_text(encoding="utf-8").strip()
        try:
            send_command(spec.socket_path, spec.token, spec.job_id, command, timeout=10)
            cmd.rename(cmd.with_suffix(".done"))
        except (EngineUnreachable, ValueError) as exc:
            print(f"control: {command} not delivered yet: {exc}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.train.remote_entry")
    parser.add_argument("--spec", required=True, type=Path)
    args = parser.parse_args(argv)
    staged = args.spec.resolve().parent
    spec, _ = JobSpec.read(args.spec)
    run_dir = Path(spec.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    _place(staged / "dataset.jsonl", Path(spec.dataset_path), spec.dataset_sha256)
    if spec.eval_path:
        _place(staged / "eval.jsonl", Path(spec.eval_path), spec.eval_sha256)
    tail = Tail(run_dir / "events.jsonl")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `ray job stop`: end the engine too, then report
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    proc = subprocess.Popen([sys.executable, "-m", "engine", "--spec", str(args.spec.resolve())], env=env,
                            stdin=subprocess.DEVNULL)
    try:
        while proc.poll() is None:
            tail.pump()
            _forward_controls(spec, run_dir / CONTROL_DIR)
            time.sleep(POLL_S)
    finally:
        if proc.poll() is None:  # the cluster stopped this wrapper: the engine goes with it
            proc.kill()
            proc.wait()
        tail.pump()
    print(f"{EXIT_PREFIX}{proc.returncode}", flush=True)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
