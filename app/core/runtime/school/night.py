"""How long a cycle trains: until its window closes, less the time judging and exporting take here, within the
policy's `train_minutes`; with the reason in words for the School tab and `school status`."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from app.core.base.store import Store
from app.core.runtime.school.policy import Policy, in_window, window_bounds

RESERVE_MIN = {"cpu": 30.0, "gpu": 10.0}  # kept to judge, export and deploy before any cycle has done it here
MARGIN = 1.25  # the measured time to judge and export, and a quarter more
MIN_TRAIN_MIN = 5.0  # a cycle always trains at least this long, even when its window is nearly over
AFTER = ("judging", "exporting", "deploying")  # the stages that follow training in a cycle
DEFAULT_MIN = 240.0  # the engine's own budget (spec.Budget) when nothing else bounds a cycle


@dataclass(frozen=True)
class NightPlan:
    minutes: float  # the training job's wall-clock budget: it stops there with a checkpoint
    why: str
    ends_at: datetime | None = None  # the latest time training stops (local time), when it started now

    def as_dict(self) -> dict:
        return {"minutes": round(self.minutes, 1), "why": self.why,
                "ends_at": self.ends_at.isoformat(timespec="minutes") if self.ends_at else None}


def reserve(store: Store, gpu: bool) -> tuple[float, str]:
    """Minutes kept after training: what judging, exporting and deploying took in the last cycle that did them (and a
    quarter more), else a default for this kind of machine."""
    from app.core.runtime.school import cycles

    for cycle in cycles.history(store, 20):
        took = [(cycle.times.get(stage) or {}).get("seconds") for stage in AFTER]
        if took[0] and took[1]:
            spent = sum(t for t in took if t) / 60
            return spent * MARGIN, f"judging and exporting took {spent:.0f} min in cycle {cycle.id}, and a quarter more"
    kind = "gpu" if gpu else "cpu"
    return RESERVE_MIN[kind], f"none measured here yet: the default for {'a GPU' if gpu else 'a CPU'} machine"


def window_end(policy: Policy, now: datetime) -> datetime | None:
    """When the window that is open now closes (None: no window, or not inside it)."""
    if policy.window == "any" or not in_window(policy, now):
        return None
    _, end = window_bounds(policy.window)
    at = now.replace(hour=end.hour, minute=end.minute, second=0, microsecond=0)
    return at if at > now else at + timedelta(days=1)


def plan(policy: Policy, store: Store, now: datetime | None = None, gpu: bool | None = None) -> NightPlan:
    """The training budget of a cycle starting `now`: inside the window, until it closes less the reserve (at least
    MIN_TRAIN_MIN); outside it (a cycle started by hand) or with no window, the policy's `train_minutes` or the
    engine's default. `train_minutes` caps it either way; `max_steps` may end training sooner."""
    from app.core.base import paths

    now = now or datetime.now().astimezone()
    gpu = paths.gpu_count() > 0 if gpu is None else gpu
    cap = policy.train_minutes or None
    steps = f", or after {policy.max_steps} steps if that comes first" if policy.max_steps else ""
    end = window_end(policy, now)
    if end is None:
        minutes = cap or DEFAULT_MIN
        why = (f"the policy's train_minutes ({cap:g})" if cap else f"the default budget of {DEFAULT_MIN:g} min"
               ) + (": no window bounds it" if policy.window == "any" else ": started outside the window")
        return NightPlan(minutes, why + steps, now + timedelta(minutes=minutes))
    kept, kept_why = reserve(store, gpu)
    left = (end - now).total_seconds() / 60 - kept
    if cap is not None and cap < left:
        minutes, why = cap, f"the policy's train_minutes ({cap:g}); the window would allow {left:.0f}"
    elif left < MIN_TRAIN_MIN:
        minutes = MIN_TRAIN_MIN
        why = (f"the window closes at {end:%H:%M}, too soon to keep {kept:.0f} min for judging and exporting: "
               f"it trains the minimum {MIN_TRAIN_MIN:g} min")
    else:
        minutes = left
        why = f"until the window closes at {end:%H:%M}, less {kept:.0f} min to judge and export ({kept_why})"
    return NightPlan(minutes, why + steps, now + timedelta(minutes=minutes))
