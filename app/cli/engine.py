"""`nightschool engine status | setup | repair`: the packaged app's own training environment, from the terminal."""
from __future__ import annotations

import argparse
import json
import sys
import threading

from app.cli.common import print_json, refusals


def register(sub) -> None:
    eng = sub.add_parser("engine", help="the training engine's environment: status, setup (resumable), repair")
    cmds = eng.add_subparsers(title="engine commands")
    st = cmds.add_parser("status", help="ready, missing, partial, outdated, broken or external (a checkout)")
    st.add_argument("--check", action="store_true", help="also import everything in it (a few seconds)")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_status)
    for name, repair, text in (("setup", False, "make (or finish) the environment: torch, transformers, PEFT, TRL, "
                                                "llama-cpp-python; resumes where an interrupted set-up stopped"),
                               ("repair", True, "remove the environment and set it up again (downloads are cached)")):
        p = cmds.add_parser(name, help=text)
        p.add_argument("--json", action="store_true", help="progress as JSON lines on stderr, the status on stdout")
        p.set_defaults(func=cmd_setup, repair=repair)
    eng.set_defaults(func=cmd_status, check=False, json=False)


def cmd_status(args: argparse.Namespace) -> int:
    from app.core.enginenv import setup

    found = setup.status(check=args.check)
    if args.json:
        return print_json(found.to_dict())
    print(f"engine: {found.state} — {found.detail}")
    if found.python:
        print(f"python: {found.python}")
    return 0 if found.state in ("ready", "external") else 1


def cmd_setup(args: argparse.Namespace) -> int:
    """Set up with the wizard's progress: stage, share done, MB or llama.cpp's compile steps, and the time left."""
    from app.cli.progress import SetupView
    from app.core.enginenv import setup

    stop = threading.Event()
    view = SetupView()

    def show(p: setup.SetupProgress) -> None:
        if args.json:
            print(json.dumps(p.__dict__), file=sys.stderr, flush=True)
        else:
            view(p)

    def go() -> int:
        try:
            found = setup.run(on_progress=show, stop=stop, repair=args.repair)
        except KeyboardInterrupt:
            stop.set()
            print("\nstopped: set up again to go on from there", file=sys.stderr)
            return 130
        finally:
            view.end_line()
        if args.json:
            return print_json(found.to_dict())
        print(f"engine: {found.state} — {found.detail}")
        return 0 if found.state == "ready" else 1

    return refusals(go)
