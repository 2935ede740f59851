"""The cycle orchestrator: starts a cycle when the triggers allow, walks it through its stages, and after a restart
continues the stage it was in (counted as a resume, never a second start). It schedules; the workers do the work."""
from __future__ import annotations

import threading

from sqlalchemy import func, select

from app.core.base.schema import CycleRow
from app.core.base.store import Store
from app.core.runtime.machinery.bus import CYCLE_ENDS, Bus, Kind
from app.core.runtime.school import cycles, stages
from app.core.runtime.school.cycles import STAGES, Cycle
from app.core.runtime.school.policy import load, paused as policy_paused
from app.core.runtime.school.report_card import report_card
from app.core.runtime.school.triggers import new_sessions, readiness


def start_now(store: Store, by: str) -> tuple[Cycle, bool]:
    """"Run a cycle now": the current cycle, or a new one the runtime takes up at once (skips the session count, the
    window and the cooldown). Returns (cycle, created)."""
    running = cycles.current(store)
    if running is not None:
        return running, False
    policy = load(store)
    inputs = {"policy": policy.model_dump(), "new_sessions": new_sessions(store, policy.base_model)}
    return cycles.start(store, policy.base_model, f"run now ({by})", inputs)


def cycle_number(store: Store, cycle: Cycle) -> int:
    with store.session() as s:
        return int(s.scalar(select(func.count()).select_from(CycleRow).where(
            CycleRow.id <= cycle.id, CycleRow.base_model == cycle.base_model)) or 0)


class Orchestrator:
    """step() does one pass; the supervisor calls it on its thread every few seconds and on events."""

    def __init__(self, store: Store, bus: Bus, queue, stop: threading.Event) -> None:
        self.store, self.bus, self.queue, self.stop = store, bus, queue, stop
        self.entered: set[tuple[int, str]] = set()  # stages entered by this process
        self.waiting: str = ""  # the last reason published (to publish changes only)

    def step(self) -> Cycle | None:
        policy = load(self.store)
        cycle = cycles.current(self.store)
        if cycle is None:
            cycle = self._maybe_start(policy)
            if cycle is None:
                return None
        if cycle.state == "approval" and cycle.inputs.get("approval") is None:
            return cycle
        if policy_paused(self.store):
            self._wait(cycle, f"learning is paused: cycle {cycle.id} goes on from {cycle.stage} when resumed")
            return cycle
        return self._advance(cycle, policy)

    def _maybe_start(self, policy) -> Cycle | None:
        ready = readiness(self.store, policy)
        if not ready.ready:
            self._wait(None, "; ".join(ready.reasons), new_sessions=ready.new_sessions, needed=ready.needed,
                       next_window=ready.next_window)
            return None
        trigger = f"{ready.new_sessions} new usable sessions (policy: {policy.min_sessions})"
        cycle, created = cycles.start(self.store, policy.base_model, trigger,
                                      {"policy": policy.model_dump(), "new_sessions": ready.new_sessions})
        if not created:  # another process started one a moment ago: it is the current cycle
            return cycle
        self.waiting = ""
        self.bus.publish(Kind.CYCLE_STARTED, cycle=cycle.id, trigger=trigger)
        return cycle

    def _wait(self, cycle: Cycle | None, reason: str, **extra) -> None:
        if reason != self.waiting:
            self.waiting = reason
            self.bus.publish(Kind.SCHOOL_WAITING, cycle=cycle.id if cycle else None, reason=reason, **extra)

    def _advance(self, cycle: Cycle, policy) -> Cycle:
        ctx = stages.Ctx(self.store, self.bus, policy, self.queue, self.stop)
        while not self.stop.is_set():
            stage = cycle.stage
            if stage == "refining" and not stages.refines(policy, cycle_number(self.store, cycle)):
                cycle = self._next(cycles.end_stage(self.store, cycle, stage, {
                    "skipped": f"refining runs every {policy.refine_every} cycles" if policy.refine_every
                    else "refining is off (policy refine_every 0)"}), stage)
                continue
            if (cycle.id, stage) not in self.entered:
                cycle, resumed = cycles.begin_stage(self.store, cycle, stage)
                self.entered.add((cycle.id, stage))
                self.bus.publish(Kind.CYCLE_STAGE, cycle=cycle.id, stage=stage, resumed=resumed)
            try:
                out = stages.RUN[stage](ctx, cycle)
            except Exception as exc:  # noqa: BLE001 - a failed stage ends the cycle with its reason
                out = stages.Outcome("failed", reason=f"{stage} failed: {exc}")
            cycle = cycles.get(self.store, cycle.id)
            if out.kind == "wait":
                return self._waiting(cycle, out.reason)
            if out.kind == "done":
                cycle = self._next(cycles.end_stage(self.store, cycle, stage, out.output), stage)
                continue
            return self._end(cycle, stage, out)
        return cycle

    def _next(self, cycle: Cycle, stage: str) -> Cycle:
        following = STAGES[STAGES.index(stage) + 1]
        return cycles.update(self.store, cycle.id, stage=following, state="running")

    def _waiting(self, cycle: Cycle, reason: str) -> Cycle:
        if reason != cycle.reason:
            cycle = cycles.update(self.store, cycle.id, reason=reason)
        if cycle.stage == "deploying" and reason.startswith("waiting for approval") and cycle.state != "approval":
            cycle = cycles.update(self.store, cycle.id, state="approval", reason=reason)
            verdict = (cycle.outputs.get("judging") or {}).get("reasons", [])
            self.bus.publish(Kind.APPROVAL_WAITING, cycle=cycle.id, checkpoint=cycle.outputs["judging"]["checkpoint"],
                             reasons=verdict)
        self._wait(cycle, reason)
        return cycle

    def _end(self, cycle: Cycle, stage: str, out: stages.Outcome) -> Cycle:
        if out.output:
            cycle = cycles.end_stage(self.store, cycle, stage, out.output)
        state = {"finished": "done", "refused": "refused", "failed": "failed"}[out.kind]
        card = report_card(self.store, cycle)
        cycle = cycles.finish(self.store, cycle, state, out.reason, card)
        event = CYCLE_ENDS[state]
        self.bus.publish(event, cycle=cycle.id, stage=stage, reason=out.reason, summary=card.get("summary", ""))
        if state == "failed":
            self.bus.publish(Kind.STAGE_FAILED, cycle=cycle.id, stage=stage, reason=out.reason)
        self.waiting = ""
        return cycle
