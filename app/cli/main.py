"""The `nightschool` command: the GUI where there is a display, a headless run where there is none, and job commands."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app.core.base import paths

if TYPE_CHECKING:  # the job spec (pydantic) is imported where a command needs it: `nightschool gui` paints sooner
    from app.core.train.spec import Hyper

RESOURCES = Path(__file__).resolve().parents[2] / "resources"
SAMPLE = RESOURCES / "sample_chat.jsonl"


def has_display() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _manager():
    from app.core.base.store import Store
    from app.core.train.jobs import JobManager

    manager = JobManager(Store())
    manager.reconcile()
    return manager


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
    args.file, args.model, args.detach = str(SAMPLE), DEFAULT_MODEL, False
    args.recipe, args.priority, args.eval, args.dry_run = "sft", "high", None, False
    args.hyper_base = {"epochs": 100, "batch_size": 4, "grad_accum": 1, "warmup": 0.0}  # a short visible demo
    code = cmd_train(args)
    if code == 0:
        print("\nNext: nightschool checkpoints · nightschool promote '#ID' (the quality gate) · "
              "nightschool deploy '#ID' (GGUF, served at http://127.0.0.1:8765/v1) · nightschool rollback")
    return code


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
    from app.ui.tray_app import run_tray

    return run_tray(held, learn=args.learn)


def _built_dataset(args: argparse.Namespace) -> None:
    """`train NAME` with a built dataset's name: its train split, on the base model it was rendered for."""
    if Path(args.file).exists():
        return
    from app.core.base.store import Store
    from app.core.datasets.catalog import Registry
    from app.core.train.spec import DEFAULT_MODEL

    ds = Registry(Store()).get(args.file)
    if ds is not None and ds.kind == "sft":
        args.file = str(Path(ds.path) / "train.jsonl")
        if args.model == DEFAULT_MODEL:
            args.model = ds.base_model


def _hyper(args: argparse.Namespace) -> Hyper:
    from app.core.train.spec import Hyper

    given = {k: getattr(args, k) for k in ("max_steps", "epochs", "batch_size", "grad_accum", "learning_rate",
                                           "method") if getattr(args, k, None) is not None}
    return Hyper(**{**getattr(args, "hyper_base", {}), **given})


def cmd_train(args: argparse.Namespace) -> int:
    """Queue a job at high priority and follow it: it starts as soon as no other job holds the machine."""
    from app.core.datafiles.chatfile import DatasetError
    from app.core.queue.scheduler import Queue
    from app.core.train.backends import BackendError
    from app.core.train.modelref import ModelRefError

    _built_dataset(args)
    queue = Queue(_manager().store)
    try:
        job = queue.add(args.file, kind=args.recipe, model=args.model, hyper=_hyper(args), priority=args.priority,
                        eval_data=args.eval, dry_run=args.dry_run, source="cli", backend=args.on)
    except (DatasetError, ModelRefError, paths.SetupError, BackendError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"job {job.id}: {args.recipe}, {job.records} records from {Path(args.file).name}, model {job.model_ref}")
    if job.error:
        print(f"note: {job.error}")
    started = _start_when_free(queue, job.id, wait=not args.detach)
    if args.detach:
        print(f"{'running' if started else 'queued'} in the background. Follow it: nightschool attach {job.id}"
              + ("" if started else " (it starts while the app or `nightschool queue run` is running)"))
        return 0
    return attach(queue.manager, job.id)


def _start_when_free(queue, job_id: str, wait: bool) -> bool:
    """Tick the queue until this job has started (another running job goes first); False if it is still waiting."""
    import time

    announced = False
    while True:
        queue.tick(scan_inbox=False)
        if queue.manager.job(job_id).state not in ("queued", "held", "launching"):
            return True
        if not wait:
            return False
        if not announced:
            print("waiting for the running job to finish (the queue runs one job at a time)…")
            announced = True
        time.sleep(1.0)


def cmd_jobs(args: argparse.Namespace) -> int:
    manager = _manager()
    jobs = manager.jobs()
    if getattr(args, "json", False):
        from app.cli.common import print_json, row_dict

        return print_json([row_dict(job) for job in jobs])
    if not jobs:
        print("no jobs yet. Start one: nightschool train FILE.jsonl")
        return 0
    print(f"{'JOB':22} {'STATE':10} {'RECORDS':>7}  MODEL / DATASET")
    for job in jobs:
        print(f"{job.id:22} {job.state:10} {job.records:>7}  {job.model_ref} / {Path(job.dataset_path).name}")
        if job.state == "failed" and job.error:
            print(f"{'':22} {job.error.splitlines()[0]}")
    return 0


def cmd_attach(args: argparse.Namespace) -> int:
    manager = _manager()
    try:
        manager.job(args.job)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    return attach(manager, args.job)


def cmd_command(args: argparse.Namespace) -> int:
    """pause / resume / stop / checkpoint: send one command to a running job."""
    manager = _manager()
    job = manager.job(args.job)
    if job.state not in ("running", "starting"):
        print(f"job {args.job} is {job.state}, not running", file=sys.stderr)
        return 2

    from app.core.queue.scheduler import Queue

    try:
        Queue(manager.store, manager, inbox=False).command(job, args.command)
    except ConnectionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.command}: confirmed by job {args.job}")
    return 0


def attach(manager, job_id: str) -> int:
    """Follow a job in the terminal with a progress bar (loss, ETA); Ctrl-C detaches and leaves it running."""
    import asyncio

    from app.cli.progress import TerminalView

    view = TerminalView(job_id)
    try:
        while True:
            asyncio.run(manager.follower(job_id, view.on_event).run())
            job = manager.finalise(job_id)  # an engine that crashed is started again here and resumes
            if job.state not in ("starting", "running"):
                break
            print(f"\nthe engine stopped without a result: resuming job {job_id} from its last checkpoint")
    except KeyboardInterrupt:
        view.close()
        print(f"\ndetached: job {job_id} keeps running. Re-attach: nightschool attach {job_id}")
        return 0
    view.close()
    return view.report(job)


def _lr_defaults() -> str:
    """DEFAULT_LR as the help says it: "sft 2e-4, orpo 3e-4, dpo/kto 5e-5, grpo/rloo 1.4e-5"."""
    from app.core.train.spec import DEFAULT_LR

    by_lr: dict[float, list[str]] = {}
    for recipe, lr in DEFAULT_LR.items():
        by_lr.setdefault(lr, []).append(recipe)
    return ", ".join(f"{'/'.join(recipes)} {lr:.1e}".replace(".0e", "e").replace("e-0", "e-")
                     for lr, recipes in by_lr.items())


def build_parser() -> argparse.ArgumentParser:
    from app.core.train.spec import DEFAULT_MODEL, RECIPES, Hyper

    parser = argparse.ArgumentParser(prog="nightschool", description=__doc__)
    parser.add_argument("--version", action="version", version=f"nightschool {paths.app_version()}")
    parser.add_argument("--headless", action="store_true", help="never open the GUI")
    parser.add_argument("--max-steps", type=int, default=20, help="steps for the headless sample run")
    parser.add_argument("--demo-only", action="store_true",
                        help="headless: train the sample and stop (no night school in the foreground)")
    parser.set_defaults(func=cmd_default)
    sub = parser.add_subparsers(title="commands")
    train = sub.add_parser("train", help="train on a JSONL file or a built dataset (queued at high priority, followed)")
    train.add_argument("file",
                       help="a JSONL file (chat, or preference pairs for dpo/orpo/kto), or a built dataset's name")
    train.add_argument("--model", default=DEFAULT_MODEL, help="'default' (embedded SmolLM2), a folder, or a hub id")
    train.add_argument("--recipe", default="sft", choices=RECIPES, help="training method (default sft)")
    train.add_argument("--method", choices=("lora", "qlora", "full"), help="adapter type (default lora)")
    train.add_argument("--max-steps", type=int, help=f"a cap on the steps (default {Hyper().max_steps})")
    train.add_argument("--epochs", type=float, help=f"passes over the data (default {Hyper().epochs:g})")
    train.add_argument("--batch-size", type=int, help=f"examples per device step (default {Hyper().batch_size})")
    train.add_argument("--grad-accum", type=int, help=f"steps accumulated per update (default {Hyper().grad_accum})")
    train.add_argument("--learning-rate", type=float, help=f"default per recipe: {_lr_defaults()}")
    train.add_argument("--eval", help="a held-out JSONL file: eval loss, best checkpoint, overfit check")
    train.add_argument("--priority", default="high", choices=("high", "normal", "low"))
    train.add_argument("--dry-run", action="store_true", help="validate data, model and plan; train nothing")
    train.add_argument("--detach", action="store_true", help="queue the job and return")
    train.add_argument("--on", choices=("local", "ray", "skypilot"), default=None,
                       help="where the engine runs: local (here), ray (a Ray cluster: train.ray.address) or skypilot (a SkyPilot managed job); default: the train.backend setting, else local")
    train.set_defaults(func=cmd_train)
    jobs = sub.add_parser("jobs", help="list jobs")
    jobs.add_argument("--json", action="store_true", help="print the jobs as JSON")
    jobs.set_defaults(func=cmd_jobs)
    att = sub.add_parser("attach", help="follow a job's progress and loss")
    att.add_argument("job")
    att.set_defaults(func=cmd_attach)
    for name, command in (("pause", "pause"), ("resume", "resume"), ("stop", "stop"),
                          ("checkpoint", "checkpoint_now")):
        p = sub.add_parser(name, help=f"{name} a running job")
        p.add_argument("job")
        p.set_defaults(func=cmd_command, command=command)
    _add_gui(sub)
    tray = sub.add_parser("tray", help="the tray icon alone: the school's state, notifications, Open (one per session)")
    tray.add_argument("--learn", action="store_true",
                      help="when nothing runs the school, start learning in the background (what autostart does)")
    tray.set_defaults(func=cmd_tray)
    from app.cli.capture import register
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
    register_school(sub)
    register_experience(sub)
    register_daemon(sub)
    register_mcp(sub)
    register_desktop(sub)
    register_engine(sub)
    register_store(sub)
    register_team(sub)
    return parser


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
