"""`nightschool school status | now | pause | resume | history [N] | show ID | policy [KEY VALUE] | approve ID |
refuse ID`: the night school from the terminal, through the School facade (reads from the store; commands are written
to the store, where the runtime takes them up). `--json` prints the facade's data and nothing else."""
from __future__ import annotations

import argparse
from datetime import datetime, timezone

from app.cli.common import SettingsCommand, open_store, print_json, refusals, show_or_set

START_HINT = ("start one: `nightschool daemon` (or open the window; `nightschool daemon install` starts it at "
              "login)")


def _school():
    from app.core.runtime.school.facade import School

    return School(open_store())


# --- formatting ------------------------------------------------------------------------------------
def when(value) -> str:
    """A stored time (ISO text, naive = UTC, or epoch seconds) as local 'YYYY-MM-DD HH:MM'; '-' when unknown."""
    if value in (None, ""):
        return "-"
    try:
        if isinstance(value, (int, float)):
            at = datetime.fromtimestamp(value, tz=timezone.utc)
        else:
            at = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
            at = at if at.tzinfo else at.replace(tzinfo=timezone.utc)
    except (ValueError, OverflowError, OSError):
        return str(value)
    return at.astimezone().strftime("%Y-%m-%d %H:%M")


def seconds(value) -> str:
    if value is None:
        return "-"
    s = float(value)
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def number(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def delta(value) -> str:
    return "-" if value is None else f"{value:+.4g}"


def progress_line(nxt: dict) -> str:
    """'12 of 50 new usable sessions; window 02:00-06:00, next at 02:00'."""
    line = f"{nxt['new_sessions']} of {nxt['needed']} new usable sessions; "
    if nxt["window"] == "any":
        return line + "any time of day"
    line += f"window {nxt['window']}"
    if nxt.get("next_window"):
        try:
            return line + f", next at {datetime.fromisoformat(nxt['next_window']):%H:%M}"
        except ValueError:
            return line + f", next at {nxt['next_window']}"
    return line + " (open now)"


def cycle_headline(c: dict) -> str:
    if c["state"] == "approval":
        return (f"cycle {c['id']} waits for your approval to deploy: nightschool school approve {c['id']} "
                f"(or refuse {c['id']})")
    return f"cycle {c['id']} is {c['state']} at stage {c['stage']}"


def runtime_line(rt: dict | None) -> str:
    if rt is None:
        return f"Runtime: none runs on this data dir, so nothing is captured or learned; {START_HINT}"
    where = "the daemon" if rt.get("role") == "daemon" else f"the {rt.get('role')}"
    return f"Runtime: {where} (pid {rt.get('pid')}, since {when(rt.get('started'))})"


def print_status(st: dict) -> None:
    student = st["student"]
    if student.get("deployed_checkpoint") is not None:
        deployed = f"deployed checkpoint {student['deployed_label']}"
    else:
        deployed = "nothing deployed yet (the base model itself)"
    print(f"Student: base model {student['base_model']}; {deployed}")
    served = student.get("served")
    if served:
        state = "parked while training" if served.get("parked") else f"served at {served.get('url')}"
        print(f"  {served.get('model')}: {state}")
    if st["paused"]:
        print("Learning is PAUSED: no cycle starts and a running one waits at its stage (nightschool school resume)")
    cycle = st.get("cycle")
    if cycle:
        print(f"Now: {cycle_headline(cycle)} (started {when(cycle.get('started_at'))}, by {cycle.get('trigger')})")
        judged = (cycle.get("outputs") or {}).get("judging") or {}
        if cycle["state"] == "approval" and judged:
            print(f"  candidate #{judged.get('checkpoint')}, gate: {judged.get('verdict')}"
                  + "".join(f"\n    - {r}" for r in judged.get("reasons") or []))
        elif cycle.get("reason"):
            print(f"  {cycle['reason']}")
    nxt = st["next"]
    print(f"Next cycle: {progress_line(nxt)}")
    if nxt.get("meaning"):
        print(f"  new = {nxt['meaning']}")
    if cycle:
        print("  (after the running cycle ends)")
    elif nxt.get("waiting"):
        for reason in nxt["waiting"]:
            print(f"  waits: {reason}")
    else:
        print("  ready: the runtime starts a cycle at its next look" if st.get("runtime")
              else "  ready, but no runtime runs to start it")
    last = st.get("last")
    if last:
        summary = (last.get("report") or {}).get("summary") or f"cycle {last['id']}"
        print(f"Last cycle: {summary} — {last['state']} {when(last.get('ended_at'))}"
              + (f": {last['reason']}" if last.get("reason") else ""))
    else:
        print("Last cycle: none yet (start one now: nightschool school now)")
    print(runtime_line(st.get("runtime")))


def print_history(rows: list[dict]) -> None:
    if not rows:
        print("no cycles yet. Start one: nightschool school now")
        return
    print(f"{'ID':>4}  {'STATE':8} {'STAGE':10} {'STARTED':16}  {'ENDED':16}  TRIGGER")
    for c in rows:
        print(f"{c['id']:>4}  {c['state']:8} {c['stage']:10} {when(c.get('started_at')):16}  "
              f"{when(c.get('ended_at')):16}  {c.get('trigger') or ''}")
        verdict = (c.get("report") or {}).get("verdict")
        said = "; ".join(x for x in ((f"gate: {verdict}" if verdict else ""), c.get("reason") or "") if x)
        if said:
            print(f"{'':6}{said[:140]}")


def _oneline(text: str, n: int = 110) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= n else "…" + text[-(n - 1):]


def print_gguf(g: dict | None) -> None:
    """The exported file through llama.cpp beside the checkpoint through transformers (the report card's `gguf`)."""
    if not g:
        return
    if g.get("error"):
        print(f"Shipped file: not judged — {g['error']}")
        return
    share = g.get("outcome_agreement")
    print(f"{'Shipped ' + (g.get('quant') or 'GGUF'):24} {'checkpoint':>10} {'GGUF':>9} {'delta':>9}")
    for name, m in (g.get("metrics") or {}).items():
        print(f"  {name:22} {number(m.get('hf')):>10} {number(m.get('gguf')):>9} {delta(m.get('delta')):>9}")
    print(f"  same next-action outcome: {'—' if share is None else f'{share:.0%}'} of {g.get('contexts_compared')}"
          + (" — FLAGGED: " + "; ".join(g["reasons"]) if g.get("flag") else ""))


def print_card(c: dict, card: dict) -> None:
    print(f"Cycle {c['id']}: {c['state']} (stage {c['stage']}), base model {c['base_model']}")
    print(f"  started {when(c.get('started_at'))} by {c.get('trigger') or '?'}; ended {when(c.get('ended_at'))}")
    if c.get("reason"):
        print(f"  {c['reason']}")
    if card.get("dataset"):
        fp = (card.get("fingerprint") or "")[:12]
        print(f"Dataset: {card['dataset']}, {number(card.get('examples'))} examples"
              + (f" (fingerprint {fp})" if fp else ""))
    print(f"Sessions: {number(card.get('sessions'))} new usable sessions when it started")
    if card.get("members"):
        print(f"Members ({len(card['members'])}): " + ", ".join(
            f"{name} {m['sessions']} session{'s' if m['sessions'] != 1 else ''} ({m['held_out']} held out)"
            for name, m in card["members"].items()))
    if card.get("steps") is not None or card.get("checkpoint") is not None:
        print(f"Training: {number(card.get('steps'))} steps"
              + (f" → checkpoint #{card['checkpoint']}" if card.get("checkpoint") is not None else ""))
    times = card.get("times") or {}
    if times:
        resumes = c.get("resumes") or {}
        print("Time per stage: " + ", ".join(
            f"{stage} {seconds(s) if s is not None else 'running'}"
            + (f" (resumed {resumes[stage]}×)" if resumes.get(stage) else "") for stage, s in times.items()))
    if card.get("judged_by"):
        print(f"Judged through {card['judged_by']}: " + ", ".join(
            f"{name} " + ("reused (same set and settings)" if e.get("reused") else seconds(e["seconds"]))
            for name, e in (card.get("evaluations") or {}).items()))
    metrics = card.get("metrics") or {}
    if metrics:
        print(f"{'Held-out metrics':24} {'base':>9} {'previous':>9} {'candidate':>9} {'vs base':>9} {'vs prev':>9}")
        for name, m in metrics.items():
            print(f"  {name:22} {number(m.get('base')):>9} {number(m.get('previous')):>9} "
                  f"{number(m.get('candidate')):>9} {delta(m.get('vs_base')):>9} {delta(m.get('vs_previous')):>9}")
    if card.get("verdict"):
        print(f"Verdict: {card['verdict']}")
        for reason in card.get("reasons") or []:
            print(f"  - {reason}")
    print_gguf(card.get("gguf"))
    if card.get("deployed") is not None or c["state"] in ("done", "refused", "failed"):
        sha = (card.get("deployed_sha256") or "")[:12]
        print(f"Deployed: {'yes' if card.get('deployed') else 'no'}" + (f" (sha256 {sha})" if sha else ""))
    for title, items in (("Gained (now agrees with the teacher)", card.get("gained")),
                         ("Lost (agreed before, not now)", card.get("lost"))):
        if not items:
            continue
        print(f"{title}:")
        for ex in items:
            print(f"  prompt:  {_oneline(ex.get('prompt'))}\n  teacher: {_oneline(ex.get('teacher'))}\n"
                  f"  before:  {_oneline(ex.get('before'))} ({ex.get('outcome_before')})\n"
                  f"  after:   {_oneline(ex.get('after'))} ({ex.get('outcome_after')})")
    if card.get("summary") and c["state"] in ("done", "refused", "failed"):
        print(f"Summary: {card['summary']}")


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
