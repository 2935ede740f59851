"""What the Team page, the School tab's team line and the tray say about the team school: pure functions of the team
server's GET /v1/status answer (`member.team_status()`), read tolerantly — a key the server does not send (an older
server: no "deployed", no "last_verdict") is simply not shown — and `DeployWatch`, the tray's change detector."""
from __future__ import annotations

import time
from dataclasses import dataclass

from app.ui.kit import local_time

NOBODY = "none yet — the team's base model is the student"
WITHDRAW_TITLE = "Withdraw my sessions"
WITHDRAW_TEXT = ("Withdraw every session this data dir sent to the team?\n\n"
                 "The team's server deletes them from its store now, and no dataset it builds from now on contains "
                 "them. Datasets it already built are not rebuilt: they say they contained sessions since withdrawn. "
                 "Your own sessions here are kept; a later push sends them again.")


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _first(found: dict, *keys: str):
    return next((found[k] for k in keys if found.get(k) not in (None, "")), None)


def deployed_key(status: dict | None) -> str | None:
    """The team's deployed checkpoint (what a change is noticed by): "deployed" when the server sends it, else the
    school's student; None when nothing is deployed."""
    deployed = _dict((status or {}).get("deployed"))
    key = _first(deployed, "checkpoint", "checkpoint_id", "id")
    if key is None:
        key = _dict(_dict((status or {}).get("school")).get("student")).get("deployed_checkpoint")
    return None if key is None else str(key)


def deployed_words(status: dict | None) -> str:
    """"checkpoint #7 of SmolLM2-135M, deployed 27 Nov 04:10 (gate: pass)" or that nothing is deployed."""
    key = deployed_key(status)
    if key is None:
        return NOBODY
    deployed = _dict((status or {}).get("deployed"))
    student = _dict(_dict((status or {}).get("school")).get("student"))
    model = _first(deployed, "model", "base_model") or student.get("base_model")
    when = local_time(_first(deployed, "when", "at", "deployed_at"), "%d %b %H:%M")
    verdict = _first(deployed, "verdict", "summary", "verdict_summary")
    if isinstance(verdict, dict):
        verdict = _first(verdict, "summary", "verdict", "outcome")
    words = f"checkpoint #{key}" + (f" of {model}" if model else "") + (f", deployed {when}" if when else "")
    return words + (f" ({verdict})" if verdict else "")


def verdict_words(status: dict | None) -> str:
    """The team's last verdict in a line; "" when the server sends none."""
    last = (status or {}).get("last_verdict")
    if isinstance(last, str):
        return last
    last = _dict(last)
    if not last:
        return ""
    outcome = _first(last, "verdict", "outcome", "decision")
    summary = _first(last, "summary", "reason")
    cycle = _first(last, "cycle", "cycle_id")
    when = local_time(_first(last, "when", "at", "created_at"), "%d %b %H:%M")
    head = " ".join(str(x) for x in (f"cycle {cycle}:" if cycle is not None else "", outcome or "") if x)
    tail = ", ".join(str(x) for x in (summary, when) if x)
    return f"{head} — {tail}" if head and tail else head or tail


def school_state(status: dict | None) -> str:
    """The team school's state in a few words: paused, a cycle at its stage, or idle with its session count."""
    school = _dict((status or {}).get("school"))
    if not school:
        return "state unknown"
    cycle = _dict(school.get("cycle"))
    paused = " (paused)" if school.get("paused") else ""
    if cycle:
        if cycle.get("state") == "approval":
            return f"cycle {cycle.get('id')} waits for the team's approval{paused}"
        return f"cycle {cycle.get('id')}: {cycle.get('stage') or 'running'}{paused}"
    if school.get("paused"):
        return "paused"
    ready = _dict(school.get("next"))
    if ready.get("needed"):
        return f"idle ({ready.get('new_sessions', 0)} of {ready['needed']} new sessions for the next cycle)"
    return "idle"


def member_rows(status: dict | None) -> list[list]:
    """[[member, sessions]] sorted by name (counts only: a member never sees another's sessions)."""
    counts = _dict((status or {}).get("sessions_per_member"))
    return [[name or "(unnamed)", int(n)] for name, n in sorted(counts.items())]


def members_words(members: int | None, sending: int) -> str:
    """The head of the counts table: how many members the team has, how many have sent sessions."""
    team = f"{members} member{'s' * (members != 1)}; " if isinstance(members, int) else ""
    if not sending:
        return team + "no member has sent a session yet."
    return team + "sessions per member (counts only):"


def outbox_words(files: int, sessions: int) -> str:
    if not files:
        return "Outbox: empty — everything captured so far was sent."
    return f"Outbox: {files} file{'s' * (files != 1)} ({sessions} session{'s' * (sessions != 1)}) waiting to be sent."


def offline_words(since: float | None, files: int) -> str:
    when = time.strftime("%H:%M", time.localtime(since)) if since else "now"
    return f"Offline since {when}, {files} file{'s' * (files != 1)} spooled."


def pushed_words(sent_sessions: int, sent_files: int, left_files: int, offline: bool, problems: list[str]) -> tuple[
        str, str]:
    """(outcome, words) of a push: sent | offline | partly."""
    if offline:
        return "offline", (f"offline: the server could not be reached; {left_files} file"
                           f"{'s' * (left_files != 1)} stay spooled and go with the next push")
    words = (f"sent {sent_sessions} session{'s' * (sent_sessions != 1)} in {sent_files} file"
             f"{'s' * (sent_files != 1)}" if sent_files else "sent: nothing new to send")
    if problems:
        return "partly", f"{words}; refused: {'; '.join(problems)}"
    return "sent", words


def withdrawn_words(count: int, datasets: list[str]) -> str:
    words = f"Withdrawn: the team's server deleted {count} of your session{'s' * (count != 1)}."
    if datasets:
        words += (f" {len(datasets)} dataset{'s' * (len(datasets) != 1)} built before say they contained them: "
                  + ", ".join(datasets) + ".")
    return words


@dataclass
class DeployWatch:
    """Notices a change of the team's deployed checkpoint: the first status read only records it (starting the tray
    is no news); each later change is said once, an unreachable server (None) changes nothing."""

    seen: str | None = None
    started: bool = False

    def see(self, status: dict | None) -> str | None:
        """The notification's words when the deployed checkpoint changed since the last read, else None."""
        if status is None:
            return None
        key = deployed_key(status)
        first, self.started = not self.started, True
        if first or key == self.seen:
            self.seen = key
            return None
        self.seen = key
        return None if key is None else f"The team's new student is deployed: {deployed_words(status)}"
