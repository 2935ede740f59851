"""`nightschool team serve | invite | revoke | members | join | push | withdraw`: team mode's server and member."""
from __future__ import annotations

import argparse
import signal
import sys

from app.cli.common import open_store, print_json, refusals


def cmd_serve(args: argparse.Namespace) -> int:
    """The HTTP API, and beside it the data dir's runtime (the team school: scheduler and cycles on the pooled
    corpus) unless --api-only or another process already holds it. SIGTERM / Ctrl-C stop both."""
    from app.core.runtime.school.facade import School
    from app.core.team.server import serve

    _log_to_stderr()
    store = open_store()
    runtime, said = _school_beside(store, args)
    print(f"team server on http://{args.host}:{args.port} (Ctrl-C stops it); {said}", flush=True)
    stopped: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _f: stopped.append(signum))
                for sig in (signal.SIGTERM, signal.SIGINT)}  # uvicorn re-raises the signal it caught once it ends
    try:
        return serve(store, School(store).status, args.host, args.port)
    finally:
        if runtime is not None:
            runtime.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        store.close()


def _school_beside(store, args: argparse.Namespace):
    """(the runtime this command started or None, what runs the school: one line)."""
    from app.cli.daemon import Notifier, log_events
    from app.core.runtime.machinery.lock import RuntimeBusy
    from app.core.runtime.supervisor import Runtime

    if args.api_only:
        return None, "API only (--api-only): the school runs where this data dir's runtime runs, if anywhere"
    runtime = Runtime(role="team server", store=store, capture=args.capture)
    try:
        runtime.start()
    except RuntimeBusy as exc:
        holder = exc.holder
        return None, (f"API only: the school already runs in {holder.get('role', 'another process')} "
                      f"(pid {holder.get('pid')}) on this data dir")
    runtime.bus.subscribe(log_events(Notifier()))
    return runtime, ("the team school runs here" + (" (capturing this machine's agents too)" if args.capture
                                                    else " (this machine's own agents are not captured)"))


def _log_to_stderr() -> None:
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)


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
    print(f"joined {args.url} (token kept in {where}). The runtime (daemon or window) ships your scrubbed sessions "
          "by itself after each capture; `nightschool team push` ships them now")
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


def cmd_retry(args: argparse.Namespace) -> int:
    from app.core.runtime import shipping

    store = open_store()
    seconds = shipping.retry_s(store) if args.seconds is None else shipping.set_retry_s(store, args.seconds)
    print(f"a member's runtime tries the team's server again every {seconds:g} s while it cannot be reached")
    return 0


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
    serve = tsub.add_parser("serve", help="run the team server on this data dir: the HTTP API members push to, and "
                                          "beside it the team school (scheduler and cycles on the pooled corpus, "
                                          "as `nightschool daemon` runs them); loopback by default")
    serve.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1; put a TLS "
                                                           "reverse proxy in front to reach it from elsewhere)")
    serve.add_argument("--port", type=int, default=8790)
    serve.add_argument("--api-only", action="store_true",
                       help="serve only the API: the school runs elsewhere on this data dir (a daemon) or not at all "
                            "(when a daemon already holds the data dir, the API alone is served anyway)")
    serve.add_argument("--capture", action="store_true",
                       help="also capture this machine's own agent sessions into the pool (off by default: the "
                            "server learns from what its members push)")
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
    retry = tsub.add_parser("retry", help="how often a member's runtime tries again while the server cannot be "
                                          "reached (seconds; shown when no value is given)")
    retry.add_argument("seconds", type=float, nargs="?")
    retry.set_defaults(func=_refusing(cmd_retry))
    withdraw = tsub.add_parser("withdraw", help="ask the server to delete every session this member sent")
    withdraw.set_defaults(func=_refusing(cmd_withdraw))
