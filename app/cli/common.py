"""What the CLI's commands share: the store, a worker's progress as tqdm bars, refusals printed as sentences, settings
shown and set by key."""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import PurePath
from typing import Any

from tqdm import tqdm

from app.core.base import protocol as P
from app.core.base.words import grouped  # noqa: F401 - the commands' one way to write a count


def open_store():
    """The data dir's store (imported late: `nightschool --help` stays fast)."""
    from app.core.base.store import Store

    return Store()


class WorkerProgress:
    """A worker's progress (evaluation, export) as a tqdm bar per phase, and its log lines."""

    def __init__(self) -> None:
        self.bar: tqdm | None = None
        self.phase = ""

    def __call__(self, env: P.Envelope) -> None:
        if env.type == "progress":
            if env.body.phase != self.phase or self.bar is None:
                self.close()
                self.phase = env.body.phase
                self.bar = tqdm(total=env.body.total, desc=env.body.phase, unit="item", file=sys.stderr,
                                dynamic_ncols=True)
            self.bar.n = env.body.step
            self.bar.refresh()
        elif env.type == "log":
            (self.bar.write if self.bar else print)(f"  {env.body.message}", file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def refusals(fn) -> int:
    """fn()'s exit code; a refusal (what, why, what to do) is printed to stderr and exits 2."""
    from app.core.base.errors import Explained

    try:
        return fn()
    except Explained as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _plain(value):
    """json.dumps' fallback: datetimes as ISO 8601 (the store's naive times are UTC and say so), paths as text."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def print_json(data) -> int:
    """`--json`: the data as one JSON document on stdout, nothing else; exit code 0."""
    print(json.dumps(data, indent=2, default=_plain, ensure_ascii=False))
    return 0


def row_dict(row, exclude: tuple[str, ...] = ()) -> dict:
    """An ORM row's columns as plain values; `<name>_json` text columns decoded under `<name>`."""
    from sqlalchemy import inspect

    out = {}
    for attr in inspect(row).mapper.column_attrs:
        key = attr.key
        if key in exclude:
            continue
        value = getattr(row, key)
        if key.endswith("_json") and isinstance(value, str):
            try:
                key, value = key[:-5], json.loads(value)
            except ValueError:
                pass
        out[key] = value
    return json.loads(json.dumps(out, default=_plain))


@dataclass
class SettingsCommand:
    """One group of settings as a command (`… KEY VALUE` sets, `… KEY` shows one, alone shows all): how to read them,
    change one (a bad key or value is refused with what is accepted), and what each accepts, in words."""

    load: Callable[[], dict]
    change: Callable[[str, Any], dict]
    accepts: Callable[[str], str]
    usage: str  # how to change one, e.g. "nightschool school policy KEY VALUE"
    applies: str = ""  # when a change takes effect, e.g. " (the runtime uses it at its next look)"
    prefix: str = ""  # before a changed key's name, e.g. "teacher "
    extra: Callable[[], dict[str, Any]] | None = None  # more data shown with all of them (in --json as it is)
    lines: Callable[[dict[str, Any]], list[str]] = lambda extra: []  # … and as lines under the listing
    means: Callable[[str], str] = lambda key: ""  # what a key means, in a line under it (the model's description)


def show_or_set(args, cmd: SettingsCommand) -> int:
    if args.key is not None and args.value is not None:
        data = cmd.change(args.key, args.value)
        if args.json:
            return print_json(data)
        print(f"{cmd.prefix}{args.key} = {data[args.key]}{cmd.applies}")
        return 0
    data = cmd.load()
    if args.key is not None and args.key not in data:
        cmd.change(args.key, None)  # refused: names the settings there are
    extra = cmd.extra() if cmd.extra and not args.key else {}
    if args.json:
        return print_json({args.key: data[args.key]} if args.key else {**data, **extra})
    for name in [args.key] if args.key else list(data):
        shown = "(not set)" if data[name] == "" else str(data[name])
        print(f"{name:16} {shown:28} accepts {cmd.accepts(name)}")
        if meaning := cmd.means(name):
            print(f"{'':16} {meaning}")
    if not args.key:
        for line in cmd.lines(extra):
            print(line)
        print(f"change one: {cmd.usage}")
    return 0
