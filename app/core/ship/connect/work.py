"""Where the student is connected and how much work it did there lately (the last 7 days): the tools `connect` set up,
the captured sessions it acted in (capture/actors) with its tool calls, the answers the server recorded in the
experience buffer, and how many of these were flagged. `school status` and the Ship tab's "Use it in…" box read
`at_work`; `words` says it in one line."""
from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from app.core.base.schema import AgentSession, ExperienceRow, MessageRow
from app.core.base.store import Store
from app.core.capture import actors
from app.core.datasets import student_work
from app.core.experience import config as experience
from app.core.ship.connect import connection

DAYS = 7


def at_work(store: Store, days: int = DAYS, now: datetime | None = None) -> dict:
    """{days, since, connected: [{agent, title, connected_at}], sessions, tool_calls, by_agent: {agent: {sessions,
    tool_calls}}, answers, flagged, buffer}: sessions are the captured ones the student acted in (mixed ones
    included, their student turns' calls counted), answers those the server recorded (while the buffer is on),
    flagged every recorded answer or offered action flagged since."""
    now = now or datetime.now(UTC)
    since = now - timedelta(days=days)
    names = actors.current(store)
    connected = [{"agent": c["agent"], "title": c["title"], "connected_at": c["connected_at"]}
                 for c in connection.connections() if c["connected"]]
    sessions, calls = _captured(store, names, since, now)
    with store.session() as db:
        recent = (ExperienceRow.created_at >= since) & (ExperienceRow.created_at <= now)
        answers = db.scalar(select(func.count()).select_from(ExperienceRow).where(
            recent, ExperienceRow.route != student_work.ROUTE)) or 0
        flagged = db.scalar(select(func.count()).select_from(ExperienceRow).where(
            recent, ExperienceRow.reasons_json != "[]")) or 0
    by_agent = {agent: {"sessions": n, "tool_calls": calls.get(agent, 0)} for agent, n in sorted(sessions.items())}
    return {"days": days, "since": since.isoformat(timespec="seconds"), "connected": connected,
            "sessions": sum(sessions.values()), "tool_calls": sum(calls.values()), "by_agent": by_agent,
            "answers": int(answers), "flagged": int(flagged), "buffer": experience.buffer(store).enabled}


def read(store: Store) -> dict:
    """at_work, or {"error": why} when the student's names cannot be read (capture.json damaged): a status that
    shows it is still read."""
    try:
        return at_work(store)
    except ValueError as exc:
        return {"error": str(exc)}


def _captured(store: Store, names: actors.Students, since: datetime, until: datetime) -> tuple[Counter, Counter]:
    """(top-level sessions, the student's tool calls) per agent, of the sessions it acted in that ended in the span
    (the transcripts' ISO times in UTC compare as text)."""
    sessions, calls = Counter(), Counter()
    ended = AgentSession.ended_at
    with store.session() as db:
        rows = db.execute(select(AgentSession.id, AgentSession.parent_id, AgentSession.agent).where(
            AgentSession.actor.in_((actors.STUDENT, actors.MIXED)), ended >= _stamp(since),
            ended <= _stamp(until) + "~")).all()  # "~": that second's fraction and zone sort below it
        agent_of = {sid: agent for sid, _, agent in rows}
        for sid, parent, agent in rows:
            sessions[agent] += parent is None
        acted = db.execute(select(MessageRow.session_id, MessageRow.model, MessageRow.tools).where(
            MessageRow.session_id.in_(list(agent_of)), MessageRow.branch == 0, MessageRow.role == "assistant",
            MessageRow.tools != "")).all() if agent_of else []
    for sid, model, tools in acted:
        if names.student(model):
            calls[agent_of[sid]] += len(tools.split(","))
    return sessions, calls


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def words(work: dict | None) -> str:
    """One line: where the student is connected and what it did there (the empty string without a reading)."""
    if not work:
        return ""
    if work.get("error"):
        return f"The student at work: unknown ({work['error']})"
    tools = ", ".join(c["title"] for c in work["connected"])
    where = f"connected to {tools}" if tools else "connected to no tool yet (nightschool connect codex)"
    done = [f"{work['sessions']} captured session{'s' * (work['sessions'] != 1)} "
            f"({work['tool_calls']} tool call{'s' * (work['tool_calls'] != 1)})"]
    if work["buffer"] or work["answers"]:
        done.append(f"{work['answers']} answer{'s' * (work['answers'] != 1)} served")
    done.append(f"{work['flagged']} flagged")
    return f"The student at work, last {work['days']} days: {where}; " + ", ".join(done)
