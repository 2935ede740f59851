"""The night school in the terminal's words: times, numbers and durations, the status (`print_status`), the cycle
history and a cycle's report card (`print_card`), written from the School facade's dicts."""
from __future__ import annotations

from datetime import datetime, timezone

START_HINT = ("start one: `nightschool daemon` (or open the window; `nightschool daemon install` starts it at "
              "login)")



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
        _print_current(cycle)
    _print_next(st, cycle)
    last = st.get("last")
    if last:
        summary = (last.get("report") or {}).get("summary") or f"cycle {last['id']}"
        print(f"Last cycle: {summary} — {last['state']} {when(last.get('ended_at'))}"
              + (f": {last['reason']}" if last.get("reason") else ""))
    else:
        print("Last cycle: none yet (start one now: nightschool school now)")
    print_blind(st.get("blind"))
    print_at_work(st.get("at_work"))
    print(runtime_line(st.get("runtime")))


def print_blind(found: list[dict] | None, title: str = "Blind test", limit: int = 3) -> None:
    """The blind test's figures (judge/blind/figure.words), the model tested last first; nothing when none."""
    from app.core.judge.blind.figure import words

    for result in (found or [])[:limit]:
        print(f"{title}: {words(result)}")


def print_at_work(work: dict | None) -> None:
    """Where the student is connected and what it did there this week (ship/connect/work); nothing without it."""
    from app.core.ship.connect.work import words

    if work:
        print(words(work))


def _print_current(cycle: dict) -> None:
    """The running cycle; one waiting for approval with its candidate and the gate's reasons."""
    print(f"Now: {cycle_headline(cycle)} (started {when(cycle.get('started_at'))}, by {cycle.get('trigger')})")
    judged = (cycle.get("outputs") or {}).get("judging") or {}
    if cycle["state"] == "approval" and judged:
        print(f"  candidate #{judged.get('checkpoint')}, gate: {judged.get('verdict')}"
              + "".join(f"\n    - {r}" for r in judged.get("reasons") or []))
    elif cycle.get("reason"):
        print(f"  {cycle['reason']}")
    planned = (cycle.get("outputs") or {}).get("training_plan")
    if planned and cycle.get("stage") == "training":
        print(f"  training until {planned['ends_at'][11:16] if planned.get('ends_at') else '?'} at the latest "
              f"({planned['minutes']:.0f} min): {planned['why']}")


def _print_next(st: dict, cycle: dict | None) -> None:
    """How far the next cycle is, and what it waits for."""
    nxt = st["next"]
    print(f"Next cycle: {progress_line(nxt)}")
    if nxt.get("meaning"):
        print(f"  new = {nxt['meaning']}")
    if planned := nxt.get("training"):
        print(f"  it would train for up to {planned['minutes']:.0f} min: {planned['why']}")
    if cycle:
        print("  (after the running cycle ends)")
    elif nxt.get("waiting"):
        for reason in nxt["waiting"]:
            print(f"  waits: {reason}")
    else:
        print("  ready: the runtime starts a cycle at its next look" if st.get("runtime")
              else "  ready, but no runtime runs to start it")


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
    _print_training(c, card)
    _print_judging(card)
    _print_outcome(c, card)


def _print_training(c: dict, card: dict) -> None:
    """Whose sessions it learned from, the training's steps and checkpoint, the time each stage took."""
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


def print_reward_parts(parts: dict | None) -> None:
    """The behavioural reward part by part, teacher / base / candidate on the same next actions (the report card's
    `reward_parts`, or any rewards.parts_table): a part that fell is marked, and so is one that ranks the teacher
    below the base."""
    if not parts or not parts.get("parts"):
        return
    weights = parts.get("weights") or {}
    below = set((parts.get("teacher_below") or {}).get("base") or [])
    columns = list(next(iter(parts["parts"].values())))
    print(f"{'Reward parts (n=' + str(parts.get('n')) + ')':24} {'weight':>9} "
          + " ".join(f"{c:>9}" for c in columns))
    for name, m in parts["parts"].items():
        marks = ("  fell" if name in (parts.get("fell") or []) else "") + ("  teacher below base" if name in below
                                                                           else "")
        weight = 1.0 if name == "total" else weights.get(name)
        print(f"  {name:22} {number(weight):>9} " + " ".join(f"{number(m.get(c)):>9}" for c in columns) + marks)


def _print_judging(card: dict) -> None:
    """How the candidate was judged: the evaluations, the held-out metrics, the verdict, the shipped file's check."""
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
    print_reward_parts(card.get("reward_parts"))
    if card.get("verdict"):
        print(f"Verdict: {card['verdict']}")
        for reason in card.get("reasons") or []:
            print(f"  - {reason}")
    print_gguf(card.get("gguf"))
    print_blind(card.get("blind"), "Blind test of this student")


def _print_outcome(c: dict, card: dict) -> None:
    """Whether it was deployed, the examples gained and lost, the summary."""
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
