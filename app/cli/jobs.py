"""`nightschool train | jobs | attach | pause | resume | stop | checkpoint`: queue a job, list jobs, follow one, and
send a running job a command."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from app.core.base import paths


def _manager():
    from app.core.base.store import Store
    from app.core.train.jobs import JobManager

    manager = JobManager(Store())
    manager.reconcile()
    return manager


@dataclass
class TrainRequest:
    """What `nightschool train` asks for, whoever asks (the command's arguments, the first-run demo): the one way a
    CLI train job is described, so no caller depends on another command's parser having run."""

    file: str
    model: str = "default"
    recipe: str = "sft"
    priority: str = "high"
    eval: str | None = None
    dry_run: bool = False
    detach: bool = False
    on: str | None = None  # None: the train.backend setting, else local
    hyper: dict = field(default_factory=dict)  # Hyper fields given; over the defaults


HYPER_ARGS = ("max_steps", "epochs", "batch_size", "grad_accum", "learning_rate", "method")


def train_request(args: argparse.Namespace) -> TrainRequest:
    """The request `nightschool train`'s parsed arguments make."""
    return TrainRequest(file=args.file, model=args.model, recipe=args.recipe, priority=args.priority, eval=args.eval,
                        dry_run=args.dry_run, detach=args.detach, on=args.on,
                        hyper={k: getattr(args, k) for k in HYPER_ARGS if getattr(args, k) is not None})


def _built_dataset(req: TrainRequest) -> TrainRequest:
    """`train NAME` with a built dataset's name: its train split, on the base model it was rendered for."""
    if Path(req.file).exists():
        return req
    from app.core.base.store import Store
    from app.core.datasets.catalog import Registry
    from app.core.train.spec import DEFAULT_MODEL

    ds = Registry(Store()).get(req.file)
    if ds is not None and ds.kind == "sft":
        return replace(req, file=str(Path(ds.path) / "train.jsonl"),
                       model=ds.base_model if req.model == DEFAULT_MODEL else req.model)
    return req


def cmd_train(args: argparse.Namespace) -> int:
    """Queue a job at high priority and follow it: it starts as soon as no other job holds the machine."""
    return run_train(train_request(args))


def run_train(req: TrainRequest) -> int:
    """Queue the request's job and follow it (or return once it started, detached)."""
    from app.core.datafiles.chatfile import DatasetError
    from app.core.queue.scheduler import Queue
    from app.core.train.backends import BackendError
    from app.core.train.modelref import ModelRefError
    from app.core.train.spec import Hyper

    req = _built_dataset(req)
    queue = Queue(_manager().store)
    try:
        job = queue.add(req.file, kind=req.recipe, model=req.model, hyper=Hyper(**req.hyper), priority=req.priority,
                        eval_data=req.eval, dry_run=req.dry_run, source="cli", backend=req.on)
    except (DatasetError, ModelRefError, paths.SetupError, BackendError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"job {job.id}: {req.recipe}, {job.records} records from {Path(req.file).name}, model {job.model_ref}")
    if job.error:
        print(f"note: {job.error}")
    started = _start_when_free(queue, job.id, wait=not req.detach)
    if req.detach:
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


def register(sub) -> None:
    """Add the job commands to the main parser's subcommands: train, jobs, attach, and one per job command."""
    _add_train(sub)
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


def add_on_option(parser) -> None:
    """`--on NAME`: the execution backends' registry (`train/backends.BACKENDS`) gives the choices and their words."""
    from app.core.train import backends

    parser.add_argument("--on", choices=backends.names(), default=None,
                        help=f"where the engine runs: {backends.described()}; default: the train.backend setting, "
                             "else local")


def _add_train(sub) -> None:
    from app.core.train.spec import DEFAULT_MODEL, RECIPES, Hyper

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
    add_on_option(train)
    train.set_defaults(func=cmd_train)
