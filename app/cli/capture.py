"""`nightschool capture status|scan|import PATH|hook` and `nightschool hooks install|uninstall|status`."""
from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import time
from pathlib import Path


def _ingestor():
    from app.core.base.store import Store
    from app.core.capture.ingest import Ingestor
    from app.core.capture.sources import CaptureConfig

    try:
        config = CaptureConfig.load()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    return Ingestor(Store(), config)


def _bar(total: int, what: str):
    from tqdm import tqdm

    return tqdm(total=total, unit="file", desc=what, disable=total < 2, leave=False, dynamic_ncols=True)


def _progress(bar):
    def step(index: int, total: int, path: Path) -> None:
        bar.total = total
        bar.update(index - bar.n)
        bar.set_postfix_str(path.name[-40:], refresh=False)
    return step


BIG_BYTES = 16 * 1024**2  # a file this big shows its own bar of bytes read while it is read


class _Reading:
    """A bytes bar under the files' bar while a big file is read (a single huge transcript shows its progress too;
    the files' bar hides below two files): the ingestor's `reading` hook."""

    def __init__(self) -> None:
        self.bar, self.path = None, None

    def __call__(self, path: Path, done: int, size: int) -> None:
        from tqdm import tqdm

        if size < BIG_BYTES:
            return
        if path != self.path:
            self.close()
            self.bar = tqdm(total=size, unit="B", unit_scale=True, unit_divisor=1024, desc=f"reading {path.name[-40:]}",
                            leave=False, dynamic_ncols=True)
            self.path = path
        self.bar.total = max(size, done)
        self.bar.update(done - self.bar.n)
        if done >= size:  # read: scrubbing and storing follow
            self.bar.set_description(f"storing {path.name[-40:]}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.bar, self.path = None, None


def _sources(ingestor) -> list[dict]:
    """Each capture source as the running runtime's watcher has it (read through its status channel); without a
    runtime that watches, a root that exists is "not running" (this command watches nothing itself)."""
    from dataclasses import asdict

    from app.core.capture.watcher import CaptureService
    from app.core.runtime.machinery import channel
    from app.core.runtime.machinery import lock

    holder = lock.holder()
    found = channel.snapshot(holder) if holder and holder.get("channel") else None
    if found and found.get("capture") is not None:
        return found["capture"]
    out = [asdict(s) for s in CaptureService(ingestor).status()]
    for s in out:
        s["state"] = "not running" if s["state"] == "stopped" else s["state"]
    return out


def cmd_status(args) -> int:
    from app.core.capture.queries import CaptureQueries

    ingestor = _ingestor()
    totals = CaptureQueries(ingestor.store).totals()
    sources = _sources(ingestor)
    if getattr(args, "json", False):
        from dataclasses import asdict

        from app.cli.common import print_json

        return print_json({"sources": sources, "totals": asdict(totals), "include": ingestor.config.include,
                           "exclude": ingestor.config.exclude, "scan_workers": ingestor.workers})
    print("Sources:")
    for s in sources:
        print(f"  {s['agent']:12} {s['state']:12} {s['root']}" + (f"  ({s['error']})" if s.get("error") else ""))
    agents = ", ".join(f"{n} {a}" for a, n in sorted(totals.by_agent.items())) or "none yet"
    print(f"Sessions: {totals.sessions} ({agents}); messages: {totals.messages}; files followed: {totals.files}")
    print(student_line(totals.by_actor))
    print(f"Lines in: {totals.lines_in} = stored {totals.stored} + quarantined "
          f"{totals.quarantined_lines} + skipped {totals.skipped}; "
          f"quarantine entries: {totals.quarantined}")
    if ingestor.config.exclude or ingestor.config.include:
        print(f"Project rules: include {ingestor.config.include or 'all'}, exclude {ingestor.config.exclude}")
    return 0


def student_line(by_actor: dict[str, int]) -> str:
    """The student's own work, counted apart from the teacher's (capture/actors)."""
    return (f"Sessions by who acted: teacher {by_actor.get('teacher', 0)}, the student's own work "
            f"{by_actor.get('student', 0)} (kept apart, never a teacher example), mixed {by_actor.get('mixed', 0)} "
            "(their teacher turns only)")


def cmd_scan(_args) -> int:
    from app.core.capture.sources import session_files
    from app.core.capture.watcher import CaptureService

    ingestor = _ingestor()
    started = time.monotonic()
    ingestor.reading = reading = _Reading()
    with _bar(len(session_files(ingestor.config)), "scanning") as bar:
        results = CaptureService(ingestor).scan(progress=_progress(bar))
    reading.close()
    _print_results(results, time.monotonic() - started)
    return 0


def cmd_import(args) -> int:
    from app.core.importer import expand, import_paths

    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        print(f"error: not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    ingestor = _ingestor()
    started = time.monotonic()
    ingestor.reading = reading = _Reading()
    with _bar(len(expand(args.paths)), "importing") as bar:
        report = import_paths(ingestor, args.paths, origin="import", progress=_progress(bar))
    reading.close()
    _print_results(report.transcripts, time.monotonic() - started, unchanged=report.unchanged)
    for check in report.datasets:
        verdict = f"accepted as {check.spec}" if check.accepted else "refused"
        print(f"dataset {check.path.name}: {verdict}; {check.summary()}")
    refused = report.refused()
    for why in refused:
        print(f"refused: {why}", file=sys.stderr)
    return 1 if refused and not (report.counts()[1]) else 0


def cmd_hook(_args) -> int:
    """Called by Claude Code's Stop/SessionEnd hook: ingest the session's file; never fail the agent."""
    from app.core.capture.hooks import AGENT, read_hook_input

    hook = read_hook_input(sys.stdin)
    if hook is None or hook.transcript_path is None:
        return 0
    try:
        _ingestor().ingest(hook.transcript_path, origin="hook", agent=AGENT)
    except Exception as exc:  # noqa: BLE001 - a hook must not break the user's agent; the watcher catches up
        print(f"nightschool: capture hook could not ingest {hook.transcript_path}: {exc}", file=sys.stderr)
    return 0


def _print_results(results, seconds: float, unchanged: int = 0) -> None:
    lines, stored = sum(r.lines_in for r in results), sum(r.stored for r in results)
    quarantined, skipped = sum(r.quarantined for r in results), sum(r.skipped for r in results)
    changed = [r for r in results if r.status == "ok"]
    print(f"{len(changed)} session files ingested in {seconds:.1f} s"
          + (f" ({unchanged} already up to date)" if unchanged else ""))
    print(f"lines in {lines} = stored {stored} + quarantined {quarantined} + skipped {skipped}")
    for r in results:
        if r.status in ("excluded", "error", "copy"):
            print(f"  {r.status}: {r.path.name}: {r.message}")


def _our_command() -> str:
    exe = shutil.which("nightschool") or str(Path(sys.executable).with_name("nightschool"))
    return shlex.quote(exe)


def cmd_hooks(args) -> int:
    from app.core.capture import hooks

    try:
        if args.action == "install":
            change = hooks.install(_our_command())
            print(f"{change.path}: added {change.added or 'nothing'}; already there {change.already or 'none'}")
            if change.backup:
                print(f"backup of your settings: {change.backup}")
        elif args.action == "uninstall":
            change = hooks.uninstall()
            print(f"{change.path}: removed {change.removed or 'nothing (none of ours were installed)'}")
        else:
            for event, on in hooks.status().items():
                print(f"{event:12} {'installed' if on else 'not installed'}")
    except hooks.HooksError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def register(sub) -> None:
    """Add the capture and hooks commands to the main parser's subcommands."""
    cap = sub.add_parser("capture", help="agent transcripts: status, scan the agents' folders, import files")
    csub = cap.add_subparsers(title="capture commands", required=True)
    st = csub.add_parser("status", help="sources, sessions and counts")
    st.add_argument("--json", action="store_true", help="print sources and counts as JSON")
    st.set_defaults(func=cmd_status)
    csub.add_parser("scan", help="ingest what changed under the agents' folders").set_defaults(func=cmd_scan)
    imp = csub.add_parser("import", help="import transcript or dataset files and folders")
    imp.add_argument("paths", nargs="+", metavar="PATH")
    imp.set_defaults(func=cmd_import)
    csub.add_parser("hook", help=argparse.SUPPRESS).set_defaults(func=cmd_hook)
    hk = sub.add_parser("hooks", help="Claude Code hooks that trigger a capture when a session stops")
    hk.add_argument("action", choices=("install", "uninstall", "status"))
    hk.set_defaults(func=cmd_hooks)
