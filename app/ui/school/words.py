"""What the School tab and the tray say: pure functions of `School.status()` and the cycle history (tested without a
window)."""
from __future__ import annotations

from app.core.base.words import eta_words
from app.core.runtime.machinery.bus import CYCLE_ENDS, Kind
from app.core.runtime.school.cycles import STAGES
from app.ui.kit import local_time
from app.ui.team.words import deployed_words, offline_words, school_state

CHART = ("agreement", "validity", "loss")
TRAINING_STAGES = ("building", "training", "refining")


def fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def signed(value: float | None) -> str:
    return "" if value is None else f"{value:+.3f}".replace("-", "−")


def deployed_card(history: list[dict]) -> dict | None:
    """The newest report card of a cycle that deployed its model (the student's scores come from it)."""
    return next((c["report"] for c in history if c.get("report", {}).get("deployed")), None)


def last_card(status: dict | None, history: list[dict]) -> tuple[dict | None, dict]:
    """(the newest ended cycle, its report card)."""
    last = (status or {}).get("last") or next((c for c in history if c.get("state") in ("done", "refused", "failed")),
                                              None)
    return last, (last or {}).get("report") or {}


def student_lines(status: dict | None, history: list[dict]) -> list[str]:
    if status is None:
        return ["Reading the school…"]
    student = status.get("student") or {}
    lines = [f"Base model: {student.get('base_model') or 'default'}"]
    if student.get("deployed_checkpoint"):
        lines.append(f"Deployed: checkpoint #{student['deployed_checkpoint']} ({student.get('deployed_label')})")
    else:
        lines.append("Deployed: nothing yet — the base model is the student")
    deployed = student.get("deployed_checkpoint")
    card = next((c["report"] for c in history if deployed and (c.get("report") or {}).get("checkpoint") == deployed),
                None) or (deployed_card(history) if deployed else None)
    label = "Scores"
    if card is None:
        _, card = last_card(status, history)
        label = "Last candidate (not deployed)"
    if card and card.get("metrics"):
        scores = []
        for key in CHART:
            m = card["metrics"].get(key) or {}
            if m.get("candidate") is not None:
                delta = signed(m.get("vs_base"))
                scores.append(f"{key} {fmt(m['candidate'])}" + (f" ({delta} vs base)" if delta else ""))
        if scores:
            lines.append(f"{label}: " + ", ".join(scores))
    served = student.get("served")
    if served:
        lines.append(f"Served: {served.get('model') or 'a model'} at {served.get('url')}"
                     + (" (parked while training)" if served.get("parked") else ""))
    else:
        lines.append("Served: not running")
    return lines


CHECK_MARK = {"improved": "✓", "worse": "✗", "regressed": "✗", "missing": "✗"}  # else "·": no significant change


def verdict_lines(card: dict) -> list[str]:
    """The gate's words on a report card: each check marked, with its interval and counts (failures first, then
    what improved, then the rest), then why it was inconclusive; a card from before the checks: its reasons."""
    checks = card.get("checks") or []
    if not checks:
        return list(card.get("reasons") or [])
    order = {"✗": 0, "✓": 1, "·": 2}
    marked = [(CHECK_MARK.get(c.get("status"), "·"), c.get("text") or "") for c in checks]
    ordered = sorted(marked, key=lambda m: order[m[0]])
    return [f"{mark} {text}" for mark, text in ordered] + list(card.get("notes") or [])


def card_reason(card: dict, reason: str) -> str:
    """A refused cycle's reason without the gate's reasons the card lists anyway (its checks)."""
    if card.get("checks") and reason.startswith("the gate refused the candidate"):
        return reason.split("): ", 1)[0] + (")" if "): " in reason else "")
    return reason


def reward_part_lines(card: dict) -> list[str]:
    """The behavioural reward part by part on a report card, "part: teacher / base / candidate" on the same next
    actions, the parts that fell (candidate below base) marked ↓ and those ranking the teacher below the base ⚠."""
    parts = card.get("reward_parts") or {}
    if not parts.get("parts"):
        return []
    fell, below = set(parts.get("fell") or []), set((parts.get("teacher_below") or {}).get("base") or [])
    lines = [f"Reward parts, teacher / base / candidate ({parts.get('n')} next actions):"]
    for name, m in parts["parts"].items():
        mark = (" ↓ fell" if name in fell else "") + (" ⚠ teacher below base" if name in below else "")
        lines.append(f"  {name.replace('_', ' ')}: {fmt(m.get('teacher'))} / {fmt(m.get('base'))} / "
                     f"{fmt(m.get('candidate'))}{mark}")
    return lines


def gguf_lines(card: dict) -> list[str]:
    """The shipped file beside the checkpoint on a report card: loss and agreement through llama.cpp vs transformers,
    how often the two agree on the next action, and a warning when the quantization loses more than allowed."""
    g = card.get("gguf") or {}
    if g.get("error"):
        return [f"Shipped file not judged: {g['error']}"]
    metrics = g.get("metrics") or {}
    if not metrics:
        return []
    loss, agreement = metrics.get("loss") or {}, metrics.get("agreement") or {}
    share = g.get("outcome_agreement")
    lines = [f"Shipped {g.get('quant') or 'GGUF'} (llama.cpp) vs checkpoint: held-out loss {fmt(loss.get('gguf'))} vs "
             f"{fmt(loss.get('hf'))}, agreement {fmt(agreement.get('gguf'), 2)} vs {fmt(agreement.get('hf'), 2)}"
             + (f"; same next action in {share:.0%} of {g.get('contexts_compared')}" if share is not None else "")]
    lines += [f"⚠ {reason}" for reason in g.get("reasons") or []]
    return lines


def next_state(status: dict | None) -> tuple[int, int, list[str]]:
    """(sessions, needed, lines) for the "next cycle" box."""
    if status is None:
        return 0, 0, []
    nxt = status.get("next") or {}
    new, needed = int(nxt.get("new_sessions") or 0), int(nxt.get("needed") or 0)
    window = nxt.get("window") or "any"
    lines = [f"Window: {'any time' if window == 'any' else window}"
             + (f" — opens {local_time(nxt['next_window'], '%a %H:%M')}" if nxt.get("next_window") else "")]
    if nxt.get("meaning"):  # what the count is: sessions a person's own dataset used still count
        lines.insert(0, f"{new} new session{'s' * (new != 1)} — {nxt['meaning']}; {needed} start a cycle.")
    cycle = status.get("cycle")
    if status.get("paused"):
        lines.append("Learning is paused: resume it to go on.")
    if cycle is not None:
        doing = "waits for your approval" if cycle.get("state") == "approval" else "is running"
        lines.append(f"Cycle {cycle['id']} {doing}: the next one is counted after it ends.")
    elif nxt.get("waiting"):
        if new < needed:
            lines.append(f"Waits for {needed - new} more session{'s' * (needed - new != 1)}.")
        # the session count and the window are said above; the other reasons (busy, battery, cool-down) here
        lines += ["Waits: " + reason for reason in nxt["waiting"]
                  if not any(said in reason for said in ("paused", "new usable sessions", "training window"))]
    else:
        lines.append("Ready: a cycle starts at the runtime's next look.")
    planned = ((cycle or {}).get("outputs") or {}).get("training_plan") if cycle else nxt.get("training")
    if planned:  # how long training runs, and why: the window's end less judging's time, or the policy's cap
        lines.append(f"Trains up to {planned['minutes']:.0f} min: {planned['why']}.")
    return new, needed, lines


def empty_text(status: dict | None) -> str:
    new, needed, _ = next_state(status)
    return f"No cycle yet — {new} of {needed} sessions captured" if status is not None else "Reading the school…"


def cycle_headline(status: dict | None, history: list[dict]) -> str:
    if status is None:
        return "Reading the school…"
    cycle = status.get("cycle")
    if cycle is None:
        if not history:
            return empty_text(status)
        last = history[0]
        said = last.get("reason") and last["state"] != "done"
        why = ("; its report card says why" if last.get("report") else f": {last['reason']}") if said else ""
        return f"No cycle running — cycle {last['id']} {last['state']}{why}"  # the reason once: the card has it
    if cycle.get("state") == "approval":
        return f"Cycle {cycle['id']} waits for your approval to deploy"
    return f"Cycle {cycle['id']} — {cycle['stage']}" + (f"  ·  trigger: {cycle['trigger']}"
                                                       if cycle.get("trigger") else "")


def stage_marks(status: dict | None, history: list[dict]) -> tuple[str | None, list[str], str]:
    """(current stage, stages done, how the current one shows: running | approval | failed | refused | done)."""
    cycle = (status or {}).get("cycle")
    if cycle is None:
        last = history[0] if history else None
        if last is None:
            return None, [], "running"
        done = [s for s in STAGES if s in (last.get("times") or {}) and s != last.get("stage")]
        if last.get("state") == "done":
            return None, [s for s in STAGES if s in (last.get("times") or {})] or list(STAGES), "done"
        return last.get("stage"), done, "refused" if last.get("state") == "refused" else "failed"
    stage = cycle.get("stage")
    done = [s for s in STAGES[:STAGES.index(stage)]] if stage in STAGES else []
    return stage, done, "approval" if cycle.get("state") == "approval" else "running"


def progress_words(event: dict | None) -> tuple[int, int, str]:
    """(step, total, words) of a cycle.progress event."""
    if not event:
        return 0, 0, ""
    step, total = int(event.get("step") or 0), int(event.get("total") or 0)
    words = [str(event.get("phase") or event.get("stage") or "")]
    if total:
        words.append(f"{step}/{total}")
    eta = eta_words(event.get("eta_s"))
    if eta:
        words.append(eta)
    return step, total, " · ".join(w for w in words if w)


def chart_points(history: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """metric -> [(cycle id, the candidate's held-out value)] over the cycles that were judged, oldest first."""
    out: dict[str, list[tuple[float, float]]] = {key: [] for key in CHART}
    for cycle in sorted(history, key=lambda c: c["id"]):
        metrics = (cycle.get("report") or {}).get("metrics") or {}
        for key in CHART:
            value = (metrics.get(key) or {}).get("candidate")
            if value is not None:
                out[key].append((float(cycle["id"]), float(value)))
    return out


def base_points(history: list[dict]) -> dict[str, float]:
    """The base model's value of each chart metric (from the newest card that has it): the dashed reference."""
    for cycle in history:
        metrics = (cycle.get("report") or {}).get("metrics") or {}
        found = {key: (metrics.get(key) or {}).get("base") for key in CHART}
        if any(v is not None for v in found.values()):
            return {k: v for k, v in found.items() if v is not None}
    return {}


def notice_text(event: dict) -> tuple[str, str, str]:
    """(title, text, level) of a NOTIFY event, as the tray or the banner says it."""
    kind, cycle = event.get("type"), event.get("cycle")
    reason = event.get("reason") or ""
    if kind == Kind.CYCLE_DONE:
        return f"Cycle {cycle} finished", event.get("summary") or f"cycle {cycle} finished", "info"
    if kind == Kind.CYCLE_REFUSED:
        return f"Cycle {cycle}: the gate refused the model", reason or event.get("summary") or "", "error"
    if kind == Kind.CYCLE_FAILED:
        where = f" at {event['stage']}" if event.get("stage") else ""
        return f"Cycle {cycle} failed{where}", reason, "error"
    if kind == Kind.STAGE_FAILED:
        return f"Cycle {cycle}: {event.get('stage')} failed", reason, "error"
    if kind == Kind.APPROVAL_WAITING:
        reasons = "; ".join(event.get("reasons") or [])
        checkpoint = f"checkpoint #{event['checkpoint']}" if event.get("checkpoint") else "the new model"
        return (f"Cycle {cycle}: deployment waits for your approval",
                f"{checkpoint} passed the gate" + (f" ({reasons})" if reasons else "")
                + ". Approve or refuse it on the School tab.", "info")
    if kind == Kind.TEAM_REFUSED:
        text = " ".join(part for part in (event.get("what") or reason, event.get("why"), event.get("fix")) if part)
        return "The team's server refused this member", text or "join the team again", "error"
    if kind == Kind.ALERT_FATAL:
        return f"Training stopped: {event.get('kind')}", f"job {event.get('job')}: {event.get('message')}", "error"
    return kind or "event", reason, "info"


def ended_words(cycle: dict) -> tuple[str, str]:
    """(level, text) the banner says once a cycle it announced has ended (the announcement would mislead now)."""
    title, text, level = notice_text({"type": CYCLE_ENDS.get(cycle.get("state"), ""), "cycle": cycle.get("id"),
                                      "stage": cycle.get("stage"), "reason": cycle.get("reason") or "",
                                      "summary": (cycle.get("report") or {}).get("summary")})
    return level, f"{title}: {text}" if text else title


def tray_state(status: dict | None, failed: bool = False, running: bool = True) -> str:
    """off | error | paused | approval | training | judging | idle, from the state (capturing is a moment: the tray
    sets it). running: whether a runtime schedules (a paused school that nothing runs is off, not paused)."""
    if not running:
        return "off"
    if failed:
        return "error"
    if (status or {}).get("paused"):
        return "paused"
    cycle = (status or {}).get("cycle")
    if cycle is None:
        return "idle"
    if cycle.get("state") == "approval":
        return "approval"
    return "training" if cycle.get("stage") in TRAINING_STAGES else "judging"


def tray_tooltip(state: str, status: dict | None, progress: dict | None = None, failed: str = "",
                 where: str = "") -> str:
    """The tray's tooltip: "Nightschool — <the state in words>", then where the school runs (or how to start it)."""
    cycle = (status or {}).get("cycle") or {}
    if state == "off":
        words = "not running" + (" (learning is paused too)" if (status or {}).get("paused") else "")
        where = "Nothing learns: start it from this menu, or open the window."
    elif state == "error":
        words = f"needs attention: {failed}" if failed else "needs attention"
    elif state == "paused":
        words = "paused" + (f" (cycle {cycle['id']} waits at {cycle.get('stage')})" if cycle else "")
    elif state == "approval":
        words = f"cycle {cycle.get('id')} waits for your approval"
    elif state in ("training", "judging"):
        words = f"{cycle.get('stage') or state} cycle {cycle.get('id')}"
        if progress and progress.get("cycle") == cycle.get("id") and progress.get("stage") == cycle.get("stage"):
            step, total, _ = progress_words(progress)
            if total:
                words += f" ({min(100, round(100 * step / total))} %)"
    elif state == "idle" and status is not None:
        new, needed, _ = next_state(status)
        words = f"idle ({new} of {needed} new sessions for the next cycle)" if needed else "idle"
    else:
        words = state or "starting"
    return f"Nightschool — {words}" + (f"\n{where[0].upper()}{where[1:]}" if where else "")


def runtime_words(status: dict | None) -> str:
    runtime = (status or {}).get("runtime")
    if not runtime:
        return "No runtime runs: nothing schedules."
    return f"Runs in the {runtime.get('role')} (pid {runtime.get('pid')})"


TEAM_RUNS = "the team's server runs its school"  # why a member's Run now / Approve / Refuse are off


def team_line(view, offline_since: float | None = None) -> str:
    """The School tab's line for a member (view: app/ui/team/controller.TeamView): "Team school at URL: <state>,
    student <…>", or how the server could not be read (offline since …, or the refused token)."""
    where = view.url or "(no token kept)"
    if view.status is None:
        return f"Team school at {where}: {view.problem if view.refused else offline_words(offline_since, view.files)}"
    return f"Team school at {where}: {school_state(view.status)}, student {deployed_words(view.status)}"
