"""`nightschool connect [AGENT] [--dry-run]` and `nightschool disconnect AGENT`: the served student set up in Codex
CLI, opencode, aider or Continue (what is written where shown first, a backup before writing, an exact undo)."""
from __future__ import annotations

import time

from app.cli.common import print_json, refusals


def _print_plan(out) -> None:
    from app.core.ship.connect.connection import shown

    plan = out.plan
    ep = plan.endpoint
    print(f"Connect {plan.agent.title} to the student served at {ep.base_url} (model {ep.model}"
          f"{'' if ep.running else '; the server is stopped now'}). Format from {plan.agent.docs}")
    for f in plan.files:
        backup = f" (backup first: {shown(f['backup'])})" if f["backup"] else " (a new file)"
        print(f"  {f['action']} {shown(f['path'])} — {f['what']}{backup}")
        for line in f["added"].splitlines():
            print(f"      | {line}")
    print(f"The API key: {plan.agent.key_note}.")


def cmd_connect(args) -> int:
    def go() -> int:
        from app.core.ship.connect import connection

        if not args.agent:
            return _list(args)
        out = connection.connect(args.agent, dry_run=args.dry_run, check=not args.no_check)
        if args.json:
            return print_json(out.payload())
        _print_plan(out)
        print("Nothing written (--dry-run)." if args.dry_run else
              f"Written. Undo: nightschool disconnect {out.plan.agent.name}")
        print("Then:" if not args.dry_run else "After connecting:")
        for line in out.plan.agent.usage(out.plan.endpoint):
            print(f"  {line}")
        if out.check is not None:
            print(f"Live check: {out.check.sentence()}")
        return 0
    return refusals(go)


def _list(args) -> int:
    from app.core.ship.connect.connection import connections, shown

    found = connections()
    if args.json:
        return print_json(found)
    for c in found:
        if c["connected"]:
            since = time.strftime("%Y-%m-%d %H:%M", time.localtime(c["connected_at"] or 0))
            changed = f"; changed since: {', '.join(map(shown, c['changed']))}" if c["changed"] else ""
            state = f"connected since {since} ({', '.join(map(shown, c['files']))}){changed}"
        else:
            state = "not connected"
        print(f"{c['agent']:9} {c['title']:10} {state}")
    print("nightschool connect AGENT [--dry-run] writes one; nightschool disconnect AGENT restores what was there.")
    return 0


def cmd_disconnect(args) -> int:
    def go() -> int:
        from app.core.ship.connect.agents import named
        from app.core.ship.connect.connection import disconnect, shown

        done = disconnect(args.agent, force=args.force)
        if args.json:
            return print_json({"agent": named(args.agent).name, "files": done})
        print(f"Disconnected {named(args.agent).title}:")
        for f in done:
            how = (f"restored from {shown(f['from'])} (the backup is removed)" if f["action"] == "restored"
                   else "deleted (nightschool had created it)")
            print(f"  {shown(f['path'])} {how}")
        return 0
    return refusals(go)


def register(sub) -> None:
    from app.core.ship.connect.agents import AGENTS

    names = ", ".join(AGENTS)
    co = sub.add_parser("connect", help=f"use the served student in an agent tool ({names}); alone: which are "
                                        "connected")
    co.add_argument("agent", nargs="?", metavar="AGENT", help=names)
    co.add_argument("--dry-run", action="store_true", help="show what would be written where; write nothing")
    co.add_argument("--no-check", action="store_true", help="skip the live tool-calling request to the server")
    co.add_argument("--json", action="store_true", help="print the plan, the files and the check as JSON")
    co.set_defaults(func=cmd_connect)
    dc = sub.add_parser("disconnect", help="restore exactly what `connect AGENT` changed (a file it made is deleted)")
    dc.add_argument("agent", metavar="AGENT", help=names)
    dc.add_argument("--force", action="store_true", help="restore even a file changed since (kept beside it as "
                                                         "<name>.nightschool-edited)")
    dc.add_argument("--json", action="store_true", help="print what was restored as JSON")
    dc.set_defaults(func=cmd_disconnect)
