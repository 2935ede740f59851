"""The `nightschool` command: the GUI where there is a display, a headless run where there is none, and job commands."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from app.core.base import paths

RESOURCES = Path(__file__).resolve().parents[2] / "resources"
SAMPLE = RESOURCES / "sample_chat.jsonl"


def has_display() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def cmd_default(args: argparse.Namespace) -> int:
    """The window where there is a display; else the first-run demo (once) and then the night school itself."""
    if has_display() and not args.headless:
        if (problem := _window_problem()) is None:
            return cmd_gui(args)
        print(f"{problem}\nGoing on without a window: the night school runs headless.\n", file=sys.stderr, flush=True)
    if paths.frozen() and (code := _engine_first()) != 0:
        return code
    if args.demo_only or not _trained_before():
        code = _demo(args)
        if code != 0 or args.demo_only:
            return code
    print("\nStarting the night school in the foreground: it captures your agents' sessions, and when enough are new "
          "it builds, trains, judges, exports and deploys a cycle by itself.\n"
          "Ctrl-C stops it (running jobs go on). At login: nightschool daemon install · "
          "Progress: nightschool school status · Agents: nightschool mcp\n", flush=True)
    from app.cli.daemon import cmd_run

    return cmd_run(args)


def _engine_first() -> int:
    """The packaged app without a window: set up (or finish, update) its engine environment before anything trains."""
    from app.cli.engine import cmd_setup
    from app.core.enginenv import setup

    found = setup.status()
    if found.state not in ("missing", "partial", "outdated"):
        return 0
    print(f"The training engine needs setting up first: {found.detail}.", flush=True)
    return cmd_setup(argparse.Namespace(json=False, repair=False))


def _trained_before() -> bool:
    """Whether this data dir already has a finished job (the demo ran, or the user trained)."""
    from sqlalchemy import select

    from app.core.base.schema import Job
    from app.core.base.store import Store

    with Store().session() as s:
        return s.scalar(select(Job.id).where(Job.state == "completed").limit(1)) is not None


def _demo(args: argparse.Namespace) -> int:
    from app.core.train.spec import DEFAULT_MODEL

    print("Running headless (no window).\n"
          f"First run: training the embedded default model ({DEFAULT_MODEL}: SmolLM2-135M-Instruct) on the sample "
          f"data in {SAMPLE.name} for {args.max_steps} steps.\n"
          "Your own data: nightschool train FILE.jsonl   ·   Jobs: nightschool jobs   ·   "
          f"Data dir: {paths.data_dir()}\n")
    from app.cli.jobs import run_train

    code = run_train(demo_request(args.max_steps))
    if code == 0:
        print("\nNext: nightschool checkpoints · nightschool promote '#ID' (the quality gate) · "
              "nightschool deploy '#ID' (GGUF, served at http://127.0.0.1:8765/v1) · nightschool rollback")
    return code


def demo_request(max_steps: int):
    """The first run's job: the sample on the embedded model, a short visible run (the default `train` request)."""
    from app.cli.jobs import TrainRequest

    return TrainRequest(file=str(SAMPLE), on="local", hyper={"max_steps": max_steps, "epochs": 100, "batch_size": 4,
                                                  "grad_accum": 1, "warmup": 0.0})


def _window_problem():
    """Why Qt's platform plugin would not load here (the system libraries it lacks, with the apt-get line), or None.
    Asked before Qt starts, because Qt aborts the whole process when no platform plugin loads."""
    from app.core.desktop.sysdeps import window_problem

    return window_problem()


def cmd_gui(args: argparse.Namespace) -> int:
    files = getattr(args, "files", None) or ()
    if getattr(args, "minimized", False) and not files:  # the old autostart line: now the tray process
        return cmd_tray(argparse.Namespace(learn=True))
    if (problem := _window_problem()) is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from app.ui.startup import paint_first

    paint_first()  # the window paints before the rest loads (the store, the panels, the runtime)
    from app.ui.main import run_gui

    return run_gui(files=files)


def cmd_tray(args: argparse.Namespace) -> int:
    """The tray icon alone (one per login session), following whichever process runs the school."""
    if not has_display() and not os.environ.get("QT_QPA_PLATFORM"):
        from app.core.base.errors import Explained

        why = Explained("the tray icon needs a desktop", "neither DISPLAY nor WAYLAND_DISPLAY is set",
                        "run it in your desktop session; without one, `nightschool school status` tells the state")
        print(f"error: {why}", file=sys.stderr)
        return 2
    if (problem := _window_problem()) is not None:  # Qt would abort without its platform plugin's libraries
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from app.core.runtime.machinery import lock

    held = lock.SessionLock.take(lock.TRAY)  # before Qt loads: a second tray leaves at once
    if held is None:
        print(f"nightschool tray: one already runs in this session (pid {lock.SessionLock.held_by(lock.TRAY)}): "
              "not starting another", flush=True)
        return 0
    from app.ui.tray.process import run_tray

    return run_tray(held, learn=args.learn)


def build_parser() -> argparse.ArgumentParser:
    from app.cli.jobs import register as register_jobs

    parser = argparse.ArgumentParser(prog="nightschool", description=__doc__)
    parser.add_argument("--version", action="version", version=f"nightschool {paths.app_version()}")
    parser.add_argument("--headless", action="store_true", help="never open the GUI")
    parser.add_argument("--max-steps", type=int, default=20, help="steps for the headless sample run")
    parser.add_argument("--demo-only", action="store_true",
                        help="headless: train the sample and stop (no night school in the foreground)")
    parser.set_defaults(func=cmd_default)
    sub = parser.add_subparsers(title="commands")
    register_jobs(sub)
    _add_gui(sub)
    _add_tray(sub)
    _register_groups(sub)
    return parser


def _register_groups(sub) -> None:
    """The command groups with a module each under app/cli, in the order `nightschool --help` lists them."""
    from app.cli.capture import register
    from app.cli.connect import register as register_connect
    from app.cli.daemon import register as register_daemon
    from app.cli.datasets import register as register_datasets
    from app.cli.desktop import register as register_desktop
    from app.cli.engine import register as register_engine
    from app.cli.experience import register as register_experience
    from app.cli.judge import register as register_judge
    from app.cli.mcp import register as register_mcp
    from app.cli.queue import register as register_queue
    from app.cli.school import register as register_school
    from app.cli.ship import register as register_ship
    from app.cli.store import register as register_store
    from app.cli.team import register as register_team

    register(sub)
    register_datasets(sub)
    register_queue(sub)
    register_judge(sub)
    register_ship(sub)
    register_connect(sub)
    register_school(sub)
    register_experience(sub)
    register_daemon(sub)
    register_mcp(sub)
    register_desktop(sub)
    register_engine(sub)
    register_store(sub)
    register_team(sub)


def _add_tray(sub) -> None:
    tray = sub.add_parser("tray", help="the tray icon alone: the school's state, notifications, Open (one per session)")
    tray.add_argument("--learn", action="store_true",
                      help="when nothing runs the school, start learning in the background (what autostart does)")
    tray.set_defaults(func=cmd_tray)


def _add_gui(sub) -> None:
    gui = sub.add_parser("gui", help="open the window")
    gui.add_argument("files", nargs="*", help="files to import, as if dropped on the window (the launcher's %%F)")
    gui.add_argument("--minimized", action="store_true", help="no window: the same as `nightschool tray --learn`")
    gui.set_defaults(func=cmd_gui)


def _gui_parser() -> argparse.ArgumentParser:
    """`nightschool gui` alone (the launcher's command): the other commands' modules are not imported before the
    window paints."""
    parser = argparse.ArgumentParser(prog="nightschool", description=__doc__)
    _add_gui(parser.add_subparsers(title="commands"))
    return parser


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    args = (_gui_parser() if given[:1] == ["gui"] else build_parser()).parse_args(given)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a reader that went away shows here, not in the interpreter's flush at exit
        return code
    except BrokenPipeError:  # `nightschool school status | head`: the Python docs' recipe, no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the flush at exit writes nowhere instead of failing again
        return 1


if __name__ == "__main__":
    sys.exit(main())
