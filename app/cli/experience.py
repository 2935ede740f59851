"""`nightschool experience list | show | correct-now | accept | reject | on | off | settings | teacher`: the experience
buffer (the student's own answers), the teacher's corrections and the teacher's settings from the terminal."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from app.cli.common import SettingsCommand, grouped, open_store, print_json, refusals, show_or_set
from app.cli.school_print import when
from app.cli.teacher import cmd_teacher
from app.core.base.errors import Explained

STATES = ("recorded", "flagged", "corrected")
KINDS = ("invalid_tool_call", "rambled", "empty", "client", "contradicted", "tool_failed")
ON_WORDS = ("the built-in server now records each request and the student's answer, with the client's label, the "
            "model, the latency and the tokens. Both are scrubbed like captured sessions (secrets removed); the API "
            "key is never stored. At most {rows} entries are kept, none older than {days} days. Answers that need "
            "improvement are flagged for the teacher")


class ExperienceCliError(Explained):
    """A command line this CLI cannot act on: what, why, what to type instead."""


# --- formatting --------------------------------------------------------------------------------------------------
def oneline(text: Any, n: int = 100) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def counted(values: dict, order: tuple[str, ...] = ()) -> str:
    """{'flagged': 2, 'recorded': 5} → 'flagged 2, recorded 5' (in `order` first; zeros left out)."""
    keys = [k for k in order if k in values] + [k for k in values if k not in order]
    return ", ".join(f"{k} {values[k]}" for k in keys if values[k]) or "none"


def buffer_line(cfg) -> str:
    if cfg.enabled:
        return (f"Buffer: on — the built-in server records what it answers (scrubbed; kept at most "
                f"{grouped(cfg.max_rows)} entries / {cfg.max_age_days:g} days)")
    return "Buffer: off — nothing is recorded (turn it on: nightschool experience on)"


def message_text(message: dict) -> str:
    """A chat message on one line: its text, then its tool calls as name(arguments)."""
    calls = [c.get("function", c) for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    said = [str(message.get("content") or "")] + [f"{f.get('name')}({oneline(f.get('arguments'), 60)})"
                                                   for f in calls]
    return oneline(" ".join(s for s in said if s), 160) or "(empty)"


# --- reading -----------------------------------------------------------------------------------------------------
def resolve(store, given: str) -> str:
    """A full experience id from an id or a unique prefix of one (like git); an unknown id is refused by the buffer."""
    from sqlalchemy import select

    from app.core.base.schema import ExperienceRow

    if not given.strip():
        raise ExperienceCliError("an experience id is needed", fix="use an id from `nightschool experience list`")
    with store.session() as s:
        if s.get(ExperienceRow, given) is not None:
            return given
        found = list(s.scalars(select(ExperienceRow.id).where(ExperienceRow.id.startswith(given, autoescape=True))
                               .limit(6)))
    if len(found) > 1:
        raise ExperienceCliError(f"{given!r} is the start of several experience ids",
                                 why=f"it matches {', '.join(found[:5])}{' …' if len(found) > 5 else ''}",
                                 fix="type more of the id")
    return found[0] if found else given  # an unknown id: the buffer says so


# --- printing ----------------------------------------------------------------------------------------------------
def print_list(cfg, counts: dict, rows: list[dict]) -> None:
    print(buffer_line(cfg))
    print(f"Entries: {counts['total']} ({counted(counts['by_state'], STATES)})")
    print(f"Flagged by reason: {counted(counts['by_reason'], KINDS)}")
    print(f"Corrections: {counted(counts['corrections'], ('waiting', 'accepted', 'rejected'))}")
    if not rows:
        print("no answers recorded yet — turn the buffer on (nightschool experience on) and send requests to the "
              "built-in server" if not counts["total"] else "no entry matches")
        return
    print(f"\n{'ID':14} {'TIME':16}  {'STATE':9} {'CLIENT':16} WHY")
    for e in rows:
        why = "; ".join(r["kind"] for r in e["reasons"]) or "-"
        print(f"{e['id'][:14]:14} {when(e['created_at']):16}  {e['state']:9} {oneline(e['client'], 16) or '-':16} "
              f"{why}")
    print("\ndetails: nightschool experience show ID (a unique start of the id is enough)")


def print_waiting(review: list[dict]) -> None:
    if not review:
        return
    print(f"\nWaiting for your review ({len(review)}): nothing of these trains before you accept it")
    for c in review:
        by = c.get("teacher_model") or c.get("source")
        print(f"  #{c['id']:<5} for {c['experience_id'][:14]:14} from {by}, score {c.get('score', 0):.2f}: "
              f"{message_text(c.get('answer') or {})[:80]}")
    print("  nightschool experience accept CID · reject CID [--reason TEXT] · show ID (the whole entry)")


def print_entry(e: dict) -> None:
    print(f"Experience {e['id']}: {e['state']}" + (f", client said {e['feedback']}" if e.get("feedback") else ""))
    print(f"  {when(e['created_at'])} · client {e['client'] or '-'} · model {e['model'] or '-'} · {e['route']} · "
          f"{e['latency_ms']:.0f} ms · {e['prompt_tokens']} + {e['completion_tokens']} tokens · "
          f"finish {e['finish_reason'] or '-'}")
    for r in e["reasons"]:
        print(f"  needs improvement ({r['kind']}): {r['text']}")
    if e.get("attempts"):
        print(f"  teacher tries: {e['attempts']}" + (f", last error: {e['last_error']}" if e.get("last_error") else "")
              + (f", next try {when(e['next_try_at'])}" if e.get("next_try_at") else ""))
    request = e.get("request") or {}
    tools = [t.get("function", t).get("name") for t in request.get("tools") or [] if isinstance(t, dict)]
    print("Request" + (f" (tools: {', '.join(map(str, tools))})" if tools else "") + ":")
    for m in request.get("messages") or []:
        print(f"  {m.get('role', '?'):9} {message_text(m)}")
    print(f"Answer:\n  {'assistant':9} {message_text(e.get('answer') or {})}")
    fixes = e.get("corrections") or []
    print("Corrections:" if fixes else "Corrections: none yet")
    for c in fixes:
        print_correction(c)


def print_correction(c: dict) -> None:
    by = c.get("teacher_model") or c.get("source") or "?"
    cost = f", cost {c['cost']:.4g}" if c.get("cost") else ""
    tok = (c.get("prompt_tokens") or 0) + (c.get("completion_tokens") or 0)
    print(f"  #{c.get('id')} {c.get('state')} — {c.get('source')} ({by}), score {c.get('score', 0):.2f}, "
          f"{tok} tokens{cost}, {when(c.get('created_at'))}"
          + (f", decided by {c['decided_by']}" if c.get("decided_by") else ""))
    if c.get("reason"):
        print(f"      {c['reason']}")
    answer = c.get("answer")
    if isinstance(answer, dict):
        print(f"      {message_text(answer)}")
    if c.get("state") == "waiting":
        print(f"      review: nightschool experience accept {c.get('id')}   (or reject {c.get('id')})")


def print_run(run: dict) -> None:
    print(f"tried {run['tried']}: {run['accepted']} accepted, {run['waiting']} waiting for review, "
          f"{run['rejected']} rejected, {run['failed']} failed; {grouped(run['tokens_used'])} tokens used, "
          f"{grouped(run['budget_left'])} left today")
    print(f"stopped: {run['stopped_because']}" if run["stopped_because"] else
          "every due answer was tried" if run["tried"] else
          "nothing to do: no flagged answer is due (each has a correction or waits out its cooldown)")
    for d in run.get("details") or []:
        print(f"  {str(d.get('experience_id'))[:14]:14} {d.get('outcome', ''):9} {d.get('reason', '')}")


# --- commands ----------------------------------------------------------------------------------------------------
def cmd_list(args) -> int:
    def go() -> int:
        from app.core.experience import buffer, config, corrections

        store = open_store()
        cfg, counts = config.buffer(store), buffer.counts(store)
        rows = buffer.entries(store, state=args.state, kind=args.reason, limit=args.limit)
        review = corrections.waiting(store)
        if args.json:
            return print_json({"buffer": cfg.model_dump(), "counts": counts, "entries": rows, "waiting": review})
        print_list(cfg, counts, rows)
        print_waiting(review)
        return 0
    return refusals(go)


def cmd_show(args) -> int:
    def go() -> int:
        from app.core.experience import buffer

        store = open_store()
        entry = buffer.get(store, resolve(store, args.id))
        if args.json:
            return print_json(entry)
        print_entry(entry)
        return 0
    return refusals(go)


def cmd_correct_now(args) -> int:
    def go() -> int:
        from app.core.experience import teacher

        print("asking the teacher…", file=sys.stderr, flush=True)
        run = teacher.correct(open_store(), limit=args.limit, by="cli").as_dict()
        if args.json:
            return print_json(run)
        print_run(run)
        return 0
    return refusals(go)


def cmd_decide(args) -> int:
    def go() -> int:
        from app.core.experience import corrections

        out = corrections.decide(open_store(), args.id, args.accept, by="cli", reason=args.reason or "")
        if args.json:
            return print_json(out)
        print(f"correction {args.id} accepted: it trains in the next cycle" if args.accept
              else f"correction {args.id} rejected" + (f": {args.reason}" if args.reason else "")
              + " (it never trains)")
        return 0
    return refusals(go)


def cmd_switch(args) -> int:
    def go() -> int:
        from app.core.experience import buffer, config

        store = open_store()
        cfg = config.set_buffer(store, "enabled", args.on)
        if args.json:
            return print_json(cfg.model_dump())
        if args.on:
            print("experience buffer on: " + ON_WORDS.format(rows=grouped(cfg.max_rows), days=f"{cfg.max_age_days:g}")
                  + ".\n  the limits: nightschool experience settings · turn it off: nightschool experience off")
        else:
            kept = buffer.counts(store)["total"]
            print(f"experience buffer off: nothing new is recorded; the {kept} entries kept stay until they age out "
                  f"({cfg.max_age_days:g} days)")
        return 0
    return refusals(go)


def cmd_settings(args) -> int:
    from app.core.base.settings import accepted  # the store and Alembic: not at `nightschool` start
    from app.core.experience import config

    def go() -> int:
        store = open_store()
        return show_or_set(args, SettingsCommand(
            load=lambda: config.buffer(store).model_dump(),
            change=lambda key, value: config.set_buffer(store, key, value).model_dump(),
            accepts=lambda key: accepted(config.BufferConfig, key), usage="nightschool experience settings KEY VALUE",
            applies=" (the server uses it for the next request)"))
    return refusals(go)


def register(sub) -> None:
    """Add `experience …` to the main parser's subcommands."""
    sp = sub.add_parser("experience", help="the student's own answers, the teacher's corrections, the teacher")
    es = sp.add_subparsers(title="experience commands", required=True)

    def command(name: str, text: str, func, **defaults) -> argparse.ArgumentParser:
        p = es.add_parser(name, help=text)
        p.add_argument("--json", action="store_true", help="print the data as JSON, nothing else")
        p.set_defaults(func=func, **defaults)
        return p

    listing = command("list", "counts by state and reason, and the newest entries", cmd_list)
    listing.add_argument("--state", choices=STATES)
    listing.add_argument("--reason", choices=KINDS, help="only entries flagged for this reason")
    listing.add_argument("--limit", type=int, default=30, help="entries shown (default 30)")
    command("show", "one entry: request, answer, reasons, corrections", cmd_show).add_argument("id", metavar="ID")
    fix = command("correct-now", "ask the teacher to re-answer flagged entries now (within the budget)",
                  cmd_correct_now)
    fix.add_argument("--limit", type=int, help="at most N entries (default: the teacher's batch_per_cycle)")
    command("accept", "let a correction waiting for review train", cmd_decide, accept=True,
            reason="").add_argument("id", type=int, metavar="CID")
    reject = command("reject", "refuse a correction waiting for review", cmd_decide, accept=False)
    reject.add_argument("id", type=int, metavar="CID")
    reject.add_argument("--reason", default="", help="why (kept with the correction)")
    command("on", "record what the built-in server answers (scrubbed, bounded)", cmd_switch, on=True)
    command("off", "stop recording", cmd_switch, on=False)
    settings = command("settings", "the buffer's settings, or set KEY VALUE", cmd_settings)
    settings.add_argument("key", nargs="?", metavar="KEY")
    settings.add_argument("value", nargs="?", metavar="VALUE")
    teacher = command("teacher", "the teacher's settings, or set KEY VALUE; `teacher key --stdin`; `teacher usage`",
                      cmd_teacher)
    teacher.add_argument("key", nargs="?", metavar="KEY", help="a setting, `key` or `usage`")
    teacher.add_argument("value", nargs="?", metavar="VALUE")
    teacher.add_argument("--stdin", action="store_true", help="with `key`: read the API key from stdin")
    teacher.add_argument("--clear", action="store_true", help="with `key`: remove the stored API key")
