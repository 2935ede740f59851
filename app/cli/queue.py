"""`nightschool queue add | list | pause | resume | stop | retry | cancel | move | priority | inbox | run …`."""
from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

from app.core.train.spec import DEFAULT_MODEL, RECIPES, Hyper

PRIORITIES = ("high", "normal", "low")
FINISHED_LISTED = 10
HINT_RUN = "queued jobs start while the app is open or `nightschool queue run` runs"


def _queue():
    from app.core.base.store import Store
    from app.core.queue.scheduler import Queue

    return Queue(Store())


def _errors(func):
    """Refusals print `error: …` (what to do is in the message) and return 2."""
    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:
        from app.core.base.paths import SetupError
        from app.core.datafiles.chatfile import DatasetError
        from app.core.queue.scheduler import EngineUnreachable, QueueError
        from app.core.train.backends import BackendError
        from app.core.train.modelref import ModelRefError

        try:
            return func(args)
        except (QueueError, DatasetError, ModelRefError, SetupError, EngineUnreachable, BackendError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return wrapper


@_errors
def cmd_add(args: argparse.Namespace) -> int:
    q = _queue()
    hyper = Hyper(max_steps=args.max_steps) if args.max_steps else None
    job = q.add(args.file, kind=args.recipe, priority=args.priority, model=args.model, hyper=hyper,
                eval_data=args.eval, dry_run=args.dry_run, source="cli", backend=args.on)
    place = next((e.place for e in q.entries(finished=0) if e.job.id == job.id), None)
    print(f"queued job {job.id} ({job.kind}, {job.priority} priority, {job.records} records from "
          f"{Path(args.file).name}){f' at place {place}' if place else ''}")
    if job.error:
        print(f"note: {job.error}")
    print(f"{HINT_RUN}. See it: nightschool queue list")
    return 0


@_errors
def cmd_list(args: argparse.Namespace) -> int:
    q = _queue()
    q.refresh()
    entries = q.entries(finished=10**6 if args.all else FINISHED_LISTED)
    if args.json:
        from app.cli.common import print_json, row_dict

        return print_json({"paused": q.paused(), "max_concurrent": q.max_concurrent(), "entries": [
            {"place": e.place, "state": e.state, "on": e.on, "step": e.step, "total": e.total, "phase": e.phase,
             "eta_s": e.eta_s, "starts_in_s": e.starts_in_s, "job": row_dict(e.job)} for e in entries]})
    print(_header(q))
    if not entries:
        print("the queue is empty. Add a job: nightschool queue add FILE.jsonl [--priority high]")
        return 0
    print(f"{'#':>3}  {'JOB':22} {'RECIPE':6} {'PRIORITY':8} {'STATE':10} {'PROGRESS':>9}  ETA / STARTS IN")
    for e in entries:
        print(_row(e, q.paused()))
        if e.state == "failed" and e.job.error:
            print(f"{'':5}{e.job.error.splitlines()[0][:110]}")
    if any(e.state == "queued" for e in entries):
        print(f"\n{HINT_RUN}.")
    return 0


def _header(q) -> str:
    n = q.max_concurrent()
    if q.paused():
        return "queue PAUSED: nothing new starts (running jobs go on). Resume: nightschool queue resume"
    return f"queue running: {n} job{'s' if n > 1 else ''} at a time"


def _row(e, paused: bool) -> str:
    place = str(e.place) if e.place else "-"
    progress = f"{e.step}/{e.total}" if e.step is not None and e.total else "-"
    on = f"  (on {e.on})" if e.on != "local" else ""
    return (f"{place:>3}  {e.job.id:22} {e.job.kind:6} {e.job.priority:8} {e.state:10} {progress:>9}  "
            f"{_timing(e, paused)}{on}")


def _timing(e, paused: bool) -> str:
    if e.place is None:
        return ""
    if e.state in ("running", "paused", "starting"):
        return f"~{duration(e.eta_s)} left" if e.eta_s is not None else "estimating"
    if e.state == "held":
        return "held (nightschool queue resume JOB)"
    if paused or e.starts_in_s is None:
        return f"waits (takes ~{duration(e.eta_s)})" if e.eta_s is not None else "waits"
    start = "next" if e.starts_in_s < 1 else f"in ~{duration(e.starts_in_s)}"
    return f"{start}, takes ~{duration(e.eta_s)}" if e.eta_s is not None else start


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


@_errors
def cmd_action(args: argparse.Namespace) -> int:
    """pause / resume (the queue, or one job) and stop / cancel / retry / priority / move (one job)."""
    q = _queue()
    q.refresh()
    if args.action == "retry":
        print(q.retry(args.job, fresh=args.fresh))
    elif args.action == "priority":
        print(q.set_priority(args.job, args.priority))
    elif args.action == "move":
        print(q.to_top(args.job) if args.top else q.move(args.job, before=args.before))
    else:
        print(getattr(q, args.action)(args.job))
    return 0


@_errors
def cmd_concurrent(args: argparse.Namespace) -> int:
    q = _queue()
    if args.n is not None:
        q.set_max_concurrent(args.n)
    print(f"up to {q.max_concurrent()} job(s) run at a time")
    return 0


@_errors
def cmd_remote(args: argparse.Namespace) -> int:
    """Show or set where jobs train (a `backends.BACKENDS` name) and each backend's settings; the Ray token: keyring."""
    from app.core.train import backends

    q = _queue()
    if args.key == "ray.token":
        token = sys.stdin.readline() if args.value in (None, "-") else args.value
        print(f"the Ray token is kept in the {backends.set_ray_token(token)}")
        return 0
    if args.key is not None:
        if args.value is None:
            raise backends.BackendError(f"no value for {args.key}", fix=f"nightschool queue remote {args.key} VALUE")
        print(f"{args.key} = {backends.set_setting(q.store, args.key, args.value)!r}")
        return 0
    for word, value in backends.show_settings(q.store).items():
        print(f"{word:24} {'' if value is None else value}")
    return 0


@_errors
def cmd_inbox(args: argparse.Namespace) -> int:
    """Show the inbox folder and the defaults its jobs get; --model / --max-steps change them."""
    from app.core.queue.inbox import DEFAULTS_KEY

    q = _queue()
    defaults = dict(q.setting(DEFAULTS_KEY, {}) or {})
    if args.model is not None or args.max_steps is not None:
        defaults.update({k: v for k, v in (("model", args.model), ("max_steps", args.max_steps)) if v is not None})
        q.set_setting(DEFAULTS_KEY, defaults)
    print(f"inbox: {q.inbox.ensure()}  (drop .jsonl files into high/, normal/ or low/; files directly in it are "
          "normal)\nper-file settings: a <name>.json next to it with kind, model, priority, max_steps, dry_run, hyper")
    print(f"defaults: {json.dumps(defaults) if defaults else 'none (the embedded model, default hyper-parameters)'}")
    print("files are taken while the app is open or `nightschool queue run --watch` runs")
    return 0


@_errors
def cmd_run(args: argparse.Namespace) -> int:
    """The scheduler in the foreground until the queue is empty (or for ever with --watch)."""
    q = _queue()
    what = f"; watching the inbox {q.inbox.ensure()}" if args.watch else ""
    print(f"running the queue, {q.max_concurrent()} job(s) at a time{what}. Ctrl-C stops the scheduler; "
          "running jobs keep running.")
    failed = False
    try:
        while True:
            failed |= _report(q.tick(scan_inbox=args.watch))
            if not args.watch and _idle(q):
                return 1 if failed else 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        print("\nscheduler stopped; running jobs keep running. Continue: nightschool queue run")
        return 0


def _report(report) -> bool:
    """Print what a tick did; True when a job failed."""
    for outcome in report.inbox:
        if outcome.job_id:
            print(f"inbox: {outcome.name} queued as job {outcome.job_id}")
        else:
            print(f"inbox: {outcome.name} refused: {outcome.reason.splitlines()[0]} (see {outcome.moved_to}"
                  ".reason.txt)")
    for job_id, state in report.ended:
        print(f"job {job_id} ended: {state}")
    for job_id in report.started:
        print(f"started job {job_id}")
    for job_id, why in report.failed_to_start:
        print(f"job {job_id} failed to start: {why}")
    return bool(report.failed_to_start) or any(state == "failed" for _, state in report.ended)


def _idle(q) -> bool:
    if q.busy():
        return False
    queued = [j for j in q.waiting() if j.state == "queued"]
    if queued and q.paused():
        print("the queue is paused with jobs waiting: nightschool queue resume")
    return not queued or q.paused()


def register(sub) -> None:
    """Add `queue …` to the main parser's subcommands."""
    from app.cli.jobs import add_on_option
    from app.core.train import backends

    qp = sub.add_parser("queue", help="the training queue: add jobs, list, pause, resume, stop, retry, reorder")
    qs = qp.add_subparsers(title="queue commands", required=True)
    add = qs.add_parser("add", help="check a file and queue a job (it starts when the queue runs)")
    add.add_argument("file", help="a JSONL training file")
    add.add_argument("--priority", choices=PRIORITIES, default="normal")
    add.add_argument("--recipe", choices=RECIPES, default="sft")
    add.add_argument("--model", default=DEFAULT_MODEL, help="'default' (embedded SmolLM2), a folder, or a hub id")
    add.add_argument("--max-steps", type=int, default=None)
    add.add_argument("--eval", default=None, metavar="FILE", help="held-out data for eval loss")
    add.add_argument("--dry-run", action="store_true", help="validate data, model and plan; train nothing")
    add_on_option(add)
    add.set_defaults(func=cmd_add)
    ls = qs.add_parser("list", help="running, waiting (with ETAs) and recent jobs")
    ls.add_argument("--all", action="store_true", help="every finished job, not only the last ones")
    ls.add_argument("--json", action="store_true", help="print the queue as JSON")
    ls.set_defaults(func=cmd_list)
    _actions(qs)
    conc = qs.add_parser("concurrent", help="show or set how many jobs run at a time (default 1)")
    conc.add_argument("n", type=int, nargs="?")
    conc.set_defaults(func=cmd_concurrent)
    inbox = qs.add_parser("inbox", help="where to drop files to queue them, and the defaults their jobs get")
    inbox.add_argument("--model", default=None, help="default model for inbox jobs")
    inbox.add_argument("--max-steps", type=int, default=None, help="default max steps for inbox jobs")
    inbox.set_defaults(func=cmd_inbox)
    remote = qs.add_parser("remote", help=f"show or set where jobs train: backend {'|'.join(backends.names())}, "
                                          "ray.address, ray.storage, skypilot.bucket, … (ray.token - reads the token "
                                          "into the keyring)")
    remote.add_argument("key", nargs="?")
    remote.add_argument("value", nargs="?")
    remote.set_defaults(func=cmd_remote)
    run = qs.add_parser("run", help="run the scheduler in the foreground until the queue is empty")
    run.add_argument("--watch", action="store_true", help="keep running and take files dropped in the inbox")
    run.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    run.set_defaults(func=cmd_run)


def _actions(qs) -> None:
    for name, text in (("pause", "pause the queue (no JOB) or a job"), ("resume", "resume the queue or a job")):
        p = qs.add_parser(name, help=text)
        p.add_argument("job", nargs="?")
        p.set_defaults(func=cmd_action, action=name)
    for name, text in (("stop", "stop a job (a running one saves a checkpoint and its adapter)"),
                       ("cancel", "cancel a job (a running one is ended; its checkpoints stay)"),
                       ("retry", "queue a failed, stopped or cancelled job again (it resumes)")):
        p = qs.add_parser(name, help=text)
        p.add_argument("job")
        p.set_defaults(func=cmd_action, action=name)
        if name == "retry":
            p.add_argument("--fresh", action="store_true", help="start over instead of resuming")
    pr = qs.add_parser("priority", help="change a waiting job's priority")
    pr.add_argument("job")
    pr.add_argument("priority", choices=PRIORITIES)
    pr.set_defaults(func=cmd_action, action="priority")
    mv = qs.add_parser("move", help="reorder a waiting job")
    mv.add_argument("job")
    where = mv.add_mutually_exclusive_group(required=True)
    where.add_argument("--top", action="store_true", help="first in the queue")
    where.add_argument("--before", metavar="JOB2", help="just before JOB2 (taking its priority)")
    where.add_argument("--bottom", action="store_true", help="last in the queue")
    mv.set_defaults(func=cmd_action, action="move")
