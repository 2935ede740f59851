"""`nightschool team serve | invite | revoke | members | join | push | withdraw`: team mode's server and member."""
from __future__ import annotations

import argparse
import sys

from app.cli.common import open_store, print_json, refusals


def cmd_serve(args: argparse.Namespace) -> int:
    from app.core.team.server import serve

    print(f"team server on http://{args.host}:{args.port} (Ctrl-C stops it)", flush=True)
    return serve(args.host, args.port)


def cmd_invite(args: argparse.Namespace) -> int:
    from app.core.team import members

    token = members.invite(open_store(), args.name)
    if args.json:
        return print_json({"name": args.name, "token": token})
    print(f"{args.name} is invited. Their token (shown once, only its hash is kept):\n{token}\n"
          "On their machine: nightschool team join URL   (paste the token when asked)")
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    from app.core.team import members

    members.revoke(open_store(), args.name)
    print(f"{args.name}'s token is refused from now on (their sessions stay until they withdraw them)")
    return 0


def cmd_members(args: argparse.Namespace) -> int:
    from app.core.team import members

    found = members.list_members(open_store())
    if args.json:
        return print_json([m.as_dict() for m in found])
    for m in found:
        print(f"{m.name}\t{'revoked' if m.revoked_at else 'active'}\tsince {m.created_at:%Y-%m-%d}")
    if not found:
        print("no members yet: nightschool team invite NAME")
    return 0


def cmd_join(args: argparse.Namespace) -> int:
    from app.core.team import member

    if sys.stdin.isatty():
        print("paste the token, then Enter: ", end="", file=sys.stderr, flush=True)
    where = member.join(args.url, sys.stdin.readline().strip())
    print(f"joined {args.url} (token kept in {where}). Ship your scrubbed sessions: nightschool team push")
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    from app.core.team import member

    done = member.push(open_store())
    if args.json:
        print_json(done.as_dict())
    else:
        print(f"spooled {done.spooled} session(s); sent {done.sent_sessions} in {done.sent_files} file(s); "
              f"{done.left_files} file(s) left in the outbox"
              + (" (the server cannot be reached: they go with the next push)" if done.offline else ""))
        for line in done.problems:
            print(f"  {line}", file=sys.stderr)
    return 0 if not done.problems else 1


def cmd_withdraw(args: argparse.Namespace) -> int:
    from app.core.team import member

    count, datasets = member.withdraw()
    print(f"the server deleted {count} of your session(s); no dataset built from now on contains them")
    if datasets:
        print(f"built before, with them: {', '.join(datasets)} (they say so; a new cycle builds without them)")
    return 0


def _refusing(fn):
    """A command whose refusal (what, why, what to do) is printed and exits 2."""
    return lambda args: refusals(lambda: fn(args))


def register(sub) -> None:
    team = sub.add_parser("team", help="team mode: one server pools the members' scrubbed sessions")
    tsub = team.add_subparsers(title="team commands", required=True)
    serve = tsub.add_parser("serve", help="run the team server on this data dir (loopback by default)")
    serve.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1; put a TLS "
                                                           "reverse proxy in front to reach it from elsewhere)")
    serve.add_argument("--port", type=int, default=8790)
    serve.set_defaults(func=cmd_serve)
    invite = tsub.add_parser("invite", help="invite a member: prints their token once")
    invite.add_argument("name")
    invite.add_argument("--json", action="store_true")
    invite.set_defaults(func=_refusing(cmd_invite))
    revoke = tsub.add_parser("revoke", help="refuse a member's token from now on")
    revoke.add_argument("name")
    revoke.set_defaults(func=_refusing(cmd_revoke))
    listing = tsub.add_parser("members", help="the invited members")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_refusing(cmd_members))
    join = tsub.add_parser("join", help="join a team server (the token is read from stdin, never the command line)")
    join.add_argument("url")
    join.set_defaults(func=_refusing(cmd_join))
    push = tsub.add_parser("push", help="spool new or changed scrubbed sessions and send the outbox")
    push.add_argument("--json", action="store_true")
    push.set_defaults(func=_refusing(cmd_push))
    withdraw = tsub.add_parser("withdraw", help="ask the server to delete every session this member sent")
    withdraw.set_defaults(func=_refusing(cmd_withdraw))
