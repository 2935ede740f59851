"""Whether a cycle may start now, and if not, why (each reason a sentence a person can act on)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone

import psutil
from sqlalchemy import func, select

from app.core.base.schema import AgentSession, BuiltDataset, DatasetSession, SessionMark
from app.core.base.store import Store
from app.core.runtime import cycles
from app.core.runtime.policy import Policy, in_window, next_window, paused


@dataclass
class Readiness:
    new_sessions: int
    needed: int
    reasons: list[str] = field(default_factory=list)  # why it waits; [] = a cycle may start
    next_window: str | None = None

    @property
    def ready(self) -> bool:
        return not self.reasons


def new_sessions(store: Store, base_model: str) -> int:
    """Captured root sessions no dataset of this base model used yet, and not marked bad."""
    with store.session() as s:
        used = select(DatasetSession.session_id).join(BuiltDataset, BuiltDataset.id == DatasetSession.dataset_id) \
            .where(BuiltDataset.base_model == base_model)
        bad = select(SessionMark.session_id).where(SessionMark.weight <= 0)
        q = select(func.count()).select_from(AgentSession).where(AgentSession.parent_id.is_(None),
                                                                  AgentSession.id.not_in(used),
                                                                  AgentSession.id.not_in(bad))
        return int(s.scalar(q) or 0)


def machine_reasons(policy: Policy) -> list[str]:
    """Laptop manners: not on battery (unless allowed), not while the machine is busy with other work."""
    out = []
    battery = psutil.sensors_battery() if hasattr(psutil, "sensors_battery") else None
    if battery is not None and not battery.power_plugged and not policy.on_battery:
        out.append(f"on battery ({battery.percent:.0f} %): a cycle waits for mains power (policy on_battery)")
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    if load > policy.max_load:
        out.append(f"the machine is busy (load {load:.2f} per core > {policy.max_load}): waiting for it to calm "
                   "down (policy max_load)")
    return out


def readiness(store: Store, policy: Policy, now: datetime | None = None, requested: bool = False) -> Readiness:
    """requested: "run a cycle now" skips the session count, the window and the cooldown (not the manners)."""
    now = now or datetime.now().astimezone()
    found = new_sessions(store, policy.base_model)
    ready = Readiness(found, policy.min_sessions)
    if paused(store):
        ready.reasons.append("learning is paused (resume it to go on)")
    if not requested:
        if found < policy.min_sessions:
            ready.reasons.append(f"{found} of {policy.min_sessions} new usable sessions since the last cycle")
        opens = next_window(policy, now)
        if opens is not None:
            ready.next_window = opens.isoformat(timespec="minutes")
            ready.reasons.append(f"outside the training window {policy.window} (next at {opens:%H:%M})")
        last = cycles.last_ended(store)
        if last is not None and last.ended_at is not None and policy.cooldown_min:
            ended = last.ended_at if last.ended_at.tzinfo else last.ended_at.replace(tzinfo=timezone.utc)
            left = policy.cooldown_min * 60 - (now - ended).total_seconds()
            if left > 0:
                ready.reasons.append(f"cooling down for {left / 60:.0f} more minutes after cycle {last.id}")
    ready.reasons += machine_reasons(policy)
    if in_window(policy, now) and ready.next_window:
        ready.next_window = None
    return ready
