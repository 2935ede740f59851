"""Whether a cycle may start now, and if not, why (each reason a sentence a person can act on)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import psutil

from app.core.base.store import Store
from app.core.datasets import pending
from app.core.datasets.catalog import Registry
from app.core.runtime.school import cycles
from app.core.runtime.school.policy import Policy, in_window, next_window, paused
from app.core.train.spec import DEFAULT_MODEL


@dataclass
class Readiness:
    new_sessions: int
    needed: int
    reasons: list[str] = field(default_factory=list)  # why it waits; [] = a cycle may start
    next_window: str | None = None

    @property
    def ready(self) -> bool:
        return not self.reasons


def model_words(base_model: str) -> str:
    return "the built-in SmolLM2" if base_model == DEFAULT_MODEL else Path(base_model).name or base_model


def meaning(base_model: str) -> str:
    """What the new-session count means, in words (the School tab and `school status` say it)."""
    return f"captured sessions no cycle of {model_words(base_model)} has trained on yet (held-out and bad ones aside)"


def new_sessions(store: Store, base_model: str) -> int:
    """New for the school: captured root sessions not marked bad, not held out, and in the train/val split of no
    dataset a cycle of this base model trained on (by session id; the build also takes one that grew since). One SQL
    count over the cycles' kept set of what is left to read (`datasets.pending`, the one their builds read): a look
    costs that set and the sessions stored since, not every session, and always equals the count over every one."""
    return pending.new_count(store, base_model, cycles.learned_from(store, base_model))


def teacher_idle(store: Store) -> str:
    """Why the teacher would correct nothing in a cycle now ("" when it is configured and something is flagged)."""
    from app.core.experience import buffer, teacher

    if not teacher.usage(store).get("configured"):
        return "no teacher is configured"
    if not buffer.counts(store)["by_state"].get("flagged"):
        return "no entry is flagged"
    return ""


def nothing_to_learn(store: Store, base_model: str, teacher: bool = True) -> str:
    """Why a cycle of this base model would have nothing to learn ("" when it has something): no new session, no
    accepted correction its cycles have not trained on, and (`teacher`: before the teacher ran) nothing for the
    teacher to correct. "Run now" refuses on it up front; the building stage checks it again after the teacher."""
    from app.core.experience.corrections import trainable

    if new_sessions(store, base_model):
        return ""
    taken = Registry(store).corrections_used(base_model, cycles.learned_from(store, base_model))
    if any(t.correction_id not in taken for t in trainable(store)):
        return ""
    idle = teacher_idle(store) if teacher else ""
    if teacher and not idle:
        return ""
    return (f"no captured session is new for {model_words(base_model)} (each was trained on by a cycle, is held out or is marked "
            "bad) and no accepted correction waits" + (f"; {idle}" if idle else ""))


def after_early_failure(store: Store, found: int) -> str:
    """A cycle that failed before training starts no cool-down, so the next one waits for something new instead:
    more new sessions than that cycle started with (else it would fail the same way, again and again)."""
    last = cycles.last_ended(store)
    if last is None or last.state != "failed" or "training" in last.starts or found > last.inputs.get("new_sessions", 0):
        return ""
    return (f"cycle {last.id} failed at {last.stage} and no new session came since: the next starts when one comes "
            "(or run one now)")


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
        elif not found and (why := nothing_to_learn(store, policy.base_model)):
            ready.reasons.append(f"nothing new to learn: {why}")
        elif retry := after_early_failure(store, found):
            ready.reasons.append(retry)
        opens = next_window(policy, now)
        if opens is not None:
            ready.next_window = opens.isoformat(timespec="minutes")
            ready.reasons.append(f"outside the training window {policy.window} (next at {opens:%H:%M})")
        last = cycles.last_trained(store)
        if last is not None and last.ended_at is not None and policy.cooldown_min:
            ended = last.ended_at if last.ended_at.tzinfo else last.ended_at.replace(tzinfo=timezone.utc)
            left = policy.cooldown_min * 60 - (now - ended).total_seconds()
            if left > 0:
                ready.reasons.append(f"cooling down for {left / 60:.0f} more minutes after cycle {last.id}")
    ready.reasons += machine_reasons(policy)
    if in_window(policy, now) and ready.next_window:
        ready.next_window = None
    return ready
