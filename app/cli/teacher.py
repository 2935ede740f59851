"""`nightschool experience teacher [KEY [VALUE]] | key --stdin [--clear] | usage`: the teacher's settings, its API key
(read from stdin, never from the command line) and the tokens it used today."""
from __future__ import annotations

import getpass
import sys

from app.cli.common import SettingsCommand, grouped, open_store, print_json, refusals, show_or_set
from app.cli.school_print import when
from app.core.base.errors import Explained

NOT_SET_UP = ("  the teacher is not set up: nightschool experience teacher url URL; … teacher model NAME; "
              "… teacher key --stdin")


class TeacherCliError(Explained):
    """A teacher command this CLI cannot act on: what, why, what to type instead."""


def usage_line(usage: dict) -> str:
    """The day's budget in words: used, allowed, left, a 429's wait, whether the teacher is set up."""
    line = f"Budget: {grouped(usage.get('tokens_today'))} of {grouped(usage.get('tokens_per_day'))} tokens today"
    if usage.get("left") is not None:
        line += f" ({grouped(usage['left'])} left)"
    if usage.get("blocked_until"):
        line += f"; the teacher asked to wait until {when(usage['blocked_until'])}"
    return line + ("" if usage.get("configured", True) else "\n" + NOT_SET_UP)


def key_place() -> str:
    """Where the teacher's key is kept, in words (never the key)."""
    from app.core.experience import keys

    place = keys.where()
    return "no key set (nightschool experience teacher key --stdin)" if place == "none" else place


def cmd_teacher(args) -> int:
    if args.key == "key":
        return refusals(lambda: teacher_key(args))
    if args.key == "usage":
        return refusals(lambda: teacher_usage(args))
    return refusals(lambda: teacher_settings(args))


def teacher_settings(args) -> int:
    from app.core.experience import config, teacher

    if args.stdin or args.clear:
        raise TeacherCliError("--stdin and --clear go with `teacher key`",
                              fix="nightschool experience teacher key --stdin < keyfile")
    from app.core.base.settings import accepted  # the store and Alembic: not at `nightschool` start

    store = open_store()
    return show_or_set(args, SettingsCommand(
        load=lambda: config.teacher(store).model_dump(),
        change=lambda key, value: config.set_teacher(store, key, value).model_dump(),
        accepts=lambda key: accepted(config.TeacherConfig, key), prefix="teacher ",
        usage="nightschool experience teacher KEY VALUE · the key: nightschool experience teacher key --stdin",
        extra=lambda: {"key": key_place(), "usage": teacher.usage(store)},
        lines=lambda extra: [f"{'key':16} {extra['key']}", usage_line(extra["usage"])]))


def teacher_key(args) -> int:
    """Store the key read from stdin (never from the command line: that shows in `ps` and the shell's history)."""
    from app.core.experience import keys

    if args.value is not None:
        raise TeacherCliError("the key is not taken from the command line",
                              why="a command line shows in the process list and the shell's history",
                              fix="nightschool experience teacher key --stdin < keyfile (or type it after "
                                  "`nightschool experience teacher key --stdin`)")
    if args.clear:
        keys.clear_key()
        return _said(args, {"key": None}, "the teacher's key is removed")
    if not args.stdin:
        place = key_place()
        return _said(args, {"key": place}, f"the teacher's key: {place}")
    key = read_secret()
    if not key:
        raise TeacherCliError("no key was given", why="stdin was empty",
                              fix="nightschool experience teacher key --stdin < keyfile")
    place = keys.set_key(key)
    return _said(args, {"key": place},
                 f"the teacher's key is kept in {place} (never in the data dir, the logs or the datasets)")


def read_secret() -> str:
    """The key from stdin: typed without echo at a terminal, else the first line of what is piped in."""
    if sys.stdin.isatty():
        return getpass.getpass("the teacher's API key: ").strip()
    return (sys.stdin.readline() or "").strip()


def teacher_usage(args) -> int:
    from app.core.experience import teacher

    usage = teacher.usage(open_store())
    return _said(args, usage, usage_line(usage))


def _said(args, data: dict, text: str) -> int:
    if args.json:
        return print_json(data)
    print(text)
    return 0
