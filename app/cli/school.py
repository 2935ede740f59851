"""`nightschool school status | now | pause | resume | history [N] | show ID | policy [KEY VALUE] | approve ID |
refuse ID`: the night school from the terminal, through the School facade (reads from the store; commands are written
to the store, where the runtime takes them up). `--json` prints the facade's data and nothing else."""
from __future__ import annotations

import argparse

from app.cli.common import SettingsCommand, open_store, print_json, refusals, show_or_set
from app.cli.school_print import START_HINT, print_card, print_history, print_status
from app.cli.school_print import cycle_headline, print_gguf, when  # noqa: F401 - importable here, as before the split


def _school():
    from app.core.runtime.school.facade import School

    return School(open_store())


# --- commands --------------------------------------------------------------------------------------
def cmd_status(args) -> int:
    def go() -> int:
        st = _school().status()
        if args.json:
            return print_json(st)
        print_status(st)
        return 0
    return refusals(go)


def cmd_now(args) -> int:
    def go() -> int:
        out = _school().now(by="cli")
        if args.json:
            return print_json(out)
        what = "started" if out["created"] else "already running"
        print(f"cycle {out['cycle']}: {what} (stage {out['stage']})", flush=True)
        print(f"  {out['note']}" if out.get("note") else "  follow it: nightschool school status")
        return 0
    return refusals(go)


def cmd_pause(args) -> int:
    def go() -> int:
        school = _school()
        if args.paused:
            school.pause()
        else:
            school.resume()
        if args.json:
            return print_json({"paused": args.paused})
        print("learning paused: no cycle starts and a running one waits at its stage (nightschool school resume)"
              if args.paused else "learning resumed")
        return 0
    return refusals(go)


def cmd_history(args) -> int:
    def go() -> int:
        rows = _school().history(args.n)
        if args.json:
            return print_json(rows)
        print_history(rows)
        return 0
    return refusals(go)


def cmd_show(args) -> int:
    def go() -> int:
        school = _school()
        c = school.cycle(args.id)
        if not c.get("report"):  # still running: the card as it stands
            from app.core.runtime.school import cycles
            from app.core.runtime.school.report_card import report_card

            c["report"] = report_card(school.store, cycles.get(school.store, args.id))
        if args.json:
            return print_json(c)
        print_card(c, c["report"])
        return 0
    return refusals(go)


def cmd_policy(args) -> int:
    def go() -> int:
        from app.core.runtime.school import policy as pol

        school = _school()
        return show_or_set(args, SettingsCommand(
            load=school.policy, change=school.set_policy, accepts=pol.accepted, means=pol.meaning,
            usage="nightschool school policy KEY VALUE", applies=" (the runtime uses it at its next look)"))
    return refusals(go)


def cmd_students(args) -> int:
    def go() -> int:
        school = _school()
        if args.measure:
            out = school.measure(args.measure)
            if args.json:
                return print_json(out)
            print(f"queued measuring job {out['job']}: {out['steps']} training steps of {out['model']}, one full window "
                  f"each; `nightschool queue run` (or the running school) runs it, then this list shows its speed")
            return 0
        out = school.students()
        if args.json:
            return print_json(out)
        from app.core.base.words import duration_words

        print(f"this machine: {out['machine']}; a cycle trains on {out['cycle_tokens_from']}")
        print(f"  {'STUDENT':34} {'TRAINS':6} {'A CYCLE':>12}  SPEED MEASURED HERE / WHY")
        for o in out["students"]:
            took = duration_words(o["cycle_training_s"]) or "-"
            speed = f"{o['tokens_per_s']:,.0f} tokens/s ({o['speed_from']})" if o["tokens_per_s"] else o["speed_from"]
            print(f"{'*' if o['current'] else ' '} {o['name']:34} {o['method'] or 'no':6} {took:>12}  {speed}")
            print(f"  {'':34} {'':6} {'':12}  {o['why']}")
        print("* the current student. Choose one: nightschool school policy base_model REF; measure one here: "
              "nightschool school students --measure REF")
        return 0
    return refusals(go)


def cmd_decide(args) -> int:
    def go() -> int:
        out = _school().decide(args.id, args.approve)
        if args.json:
            return print_json(out)
        from app.core.runtime.machinery import lock

        verb = "approved: the runtime deploys it" if args.approve else "refused: the cycle ends without deploying"
        print(f"cycle {args.id}: deployment {verb}")
        if lock.holder() is None:
            print(f"  no runtime runs on this data dir: {START_HINT}")
        return 0
    return refusals(go)


def register(sub) -> None:
    """Add `school …` to the main parser's subcommands."""
    sp = sub.add_parser("school", help="the night school: status, run a cycle now, pause, history, policy, approve")
    ss = sp.add_subparsers(title="school commands", required=True)

    def command(name: str, text: str, func, **defaults) -> argparse.ArgumentParser:
        p = ss.add_parser(name, help=text)
        p.add_argument("--json", action="store_true", help="print the data as JSON, nothing else")
        p.set_defaults(func=func, **defaults)
        return p

    command("status", "the student, progress to the next cycle, the running cycle, the runtime", cmd_status)
    command("now", "start a cycle now (or name the running one)", cmd_now)
    command("pause", "no cycle starts; a running one waits at its stage", cmd_pause, paused=True)
    command("resume", "learn again", cmd_pause, paused=False)
    hist = command("history", "the last N cycles (default 10)", cmd_history)
    hist.add_argument("n", type=int, nargs="?", default=10, metavar="N")
    show = command("show", "a cycle's report card", cmd_show)
    show.add_argument("id", type=int, metavar="ID")
    pol = command("policy", "show the policy, or set KEY VALUE", cmd_policy)
    pol.add_argument("key", nargs="?", metavar="KEY")
    pol.add_argument("value", nargs="?", metavar="VALUE")
    stu = command("students", "the students this machine can train and a cycle's time for each, measured here",
                  cmd_students)
    stu.add_argument("--measure", metavar="MODEL", help="queue a short job that measures MODEL's speed here")
    for name, approve, text in (("approve", True, "deploy what a cycle waiting for approval produced"),
                                ("refuse", False, "end a cycle waiting for approval without deploying")):
        p = command(name, text, cmd_decide, approve=approve)
        p.add_argument("id", type=int, metavar="ID")
