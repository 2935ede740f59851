"""The school's facade: what the CLI, the window, the tray and the MCP server ask and tell the running school.
Reads come from the store (no runtime needed); commands are written to the store, where the runtime takes them up."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from sqlalchemy import select

from app.core.base.errors import Explained
from app.core.base.schema import AgentSession, SessionMark
from app.core.base.store import Store
from app.core.runtime.school import cycles, night
from app.core.runtime.machinery import lock
from app.core.runtime.school import policy as pol
from app.core.runtime.school.orchestrator import start_now
from app.core.runtime.school.report_card import with_blind
from app.core.runtime.school.triggers import meaning, nothing_to_learn, readiness

if TYPE_CHECKING:
    from app.core.judge.blind.trials import BlindTest
    from app.core.judge.records import Target

GOOD_WEIGHT, BAD_WEIGHT = 2.0, 0.0


class SchoolError(Explained):
    """A school command that cannot be done: what, why, what to do."""


class School:
    """One data dir's school (in the spirit of Anki's Collection: every front end calls these)."""

    def __init__(self, store: Store | None = None) -> None:
        self.store = store or Store()

    # --- reads -----------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        policy = pol.load(self.store)
        ready = readiness(self.store, policy)
        current = cycles.current(self.store)
        last = cycles.last_ended(self.store)
        holder = lock.holder()
        blind = self.blind_results()
        return {
            "runtime": {k: holder[k] for k in ("role", "pid", "started")} if holder else None,
            "paused": pol.paused(self.store),
            "policy": policy.model_dump(),
            "student": self.student(policy.base_model),
            "next": {"new_sessions": ready.new_sessions, "needed": ready.needed, "window": policy.window,
                     "next_window": ready.next_window, "waiting": ready.reasons,
                     "meaning": meaning(policy.base_model), "training": night.plan(policy, self.store).as_dict()},
            "cycle": current.to_dict() if current else None,
            "last": with_blind(self.store, last.to_dict(), blind) if last else None,
            "blind": blind,
            "at_work": self.at_work(),
        }

    def student(self, base_model: str) -> dict[str, Any]:
        from app.core.judge.deployment import deployed_target, served
        from app.core.ship import serving

        target = deployed_target(self.store, base_model)
        row = served(self.store)
        state = serving.state()
        return {"base_model": base_model, "deployed_checkpoint": target.id if target else None,
                "deployed_label": target.label if target else "base",
                "served": {"url": state.get("url"), "model": (state.get("current") or {}).get("name"),
                           "sha256": (state.get("current") or {}).get("sha256"), "parked": state.get("parked", False)}
                if state else None,
                "deployment": {"id": row.id, "sha256": row.sha256, "file": row.file, "note": row.note} if row else None}

    def at_work(self) -> dict[str, Any]:
        """Where the student is connected and what it did there in the last 7 days (ship/connect/work.read)."""
        from app.core.ship.connect.work import read

        return read(self.store)

    def history(self, limit: int = 10) -> list[dict[str, Any]]:
        """The newest cycles, each report card with its student's blind test figures as they are now."""
        every = self.blind_results()
        return [with_blind(self.store, c.to_dict(), every) for c in cycles.history(self.store, limit)]

    def cycle(self, cycle_id: int) -> dict[str, Any]:
        found = cycles.get(self.store, cycle_id)
        if found is None:
            raise SchoolError(f"there is no cycle {cycle_id}", fix="see `nightschool school history`")
        return with_blind(self.store, found.to_dict())

    def policy(self) -> dict[str, Any]:
        return pol.load(self.store).model_dump()

    def students(self, machine=None) -> dict[str, Any]:
        """The students this machine can train, each with a cycle's training time from speed measured here."""
        from app.core.runtime.school import students

        machine = machine or students.this_machine()
        policy = pol.load(self.store)
        found, tokens_from = students.offers(self.store, machine, policy.base_model, policy.max_steps,
                                             policy.max_length)
        return {"machine": machine.words(), "cycle_tokens_from": tokens_from,
                "students": [o.as_dict() for o in found]}

    def measure(self, model: str) -> dict[str, Any]:
        """Queue a short measuring job of a model (the runtime's queue runs it); its speed then feeds students()."""
        from app.core.queue.scheduler import Queue
        from app.core.runtime.school import students

        job = students.measure(Queue(self.store, inbox=False), model, pol.load(self.store).max_length)
        return {"job": job.id, "model": model, "steps": students.MEASURE_STEPS}

    def checkpoints(self) -> list[dict[str, Any]]:
        from app.core.judge.records import all_checkpoints, passing_verdict

        return [{"id": t.id, "label": t.label, "base_model": t.base_model, "adapter": t.adapter,
                 "passed_gate": passing_verdict(self.store, t.id) is not None}
                for t in all_checkpoints(self.store)]

    # --- commands --------------------------------------------------------------------------------
    def now(self, by: str = "cli") -> dict[str, Any]:
        """Start a cycle now (or name the one running): its id at once; progress through status(). Refused, with no
        cycle recorded, when there is nothing new to learn."""
        if pol.paused(self.store):
            raise SchoolError("learning is paused", fix="resume it first (nightschool school resume)")
        base_model = pol.load(self.store).base_model
        if cycles.current(self.store) is None and (why := nothing_to_learn(self.store, base_model)):
            raise SchoolError("nothing new to learn", why=why,
                              fix="capture or import more agent sessions (or accept a correction); a cycle starts "
                                  "by itself once enough are new")
        cycle, created = start_now(self.store, by)
        runs = lock.holder() is not None
        return {"cycle": cycle.id, "created": created, "stage": cycle.stage, "runtime": runs,
                "note": "" if runs else "no runtime runs on this data dir: start `nightschool daemon` (or open the "
                                        "window) and the cycle goes on"}

    def pause(self) -> None:
        pol.set_paused(self.store, True)

    def resume(self) -> None:
        pol.set_paused(self.store, False)

    def set_policy(self, key: str, value: Any) -> dict[str, Any]:
        return pol.set_value(self.store, key, value).model_dump()

    def decide(self, cycle_id: int, approve: bool) -> dict[str, Any]:
        """Approve or refuse a deployment that waits for approval."""
        found = cycles.get(self.store, cycle_id)
        if found is None or found.state != "approval":
            raise SchoolError(f"cycle {cycle_id} is not waiting for approval",
                              why=f"it is {found.state} at {found.stage}" if found else "there is no such cycle",
                              fix="see `nightschool school status`")
        inputs = {**found.inputs, "approval": "approved" if approve else "refused"}
        return cycles.update(self.store, cycle_id, inputs=inputs, state="running").to_dict()

    def mark_session(self, session_id: str, good: bool, note: str = "") -> dict[str, Any]:
        """A session's weight for the dataset builder: good ones count twice, bad ones are left out."""
        with self.store.session() as s:
            if s.get(AgentSession, session_id) is None:
                raise SchoolError(f"there is no captured session {session_id!r}",
                                  fix="see `nightschool capture status` for what was captured")
            weight = GOOD_WEIGHT if good else BAD_WEIGHT
            s.merge(SessionMark(session_id=session_id, weight=weight, note=note))
        return {"session": session_id, "weight": weight}

    def marks(self) -> dict[str, float]:
        with self.store.session() as s:
            return {m.session_id: m.weight for m in s.scalars(select(SessionMark))}

    def ask(self, question: str, max_tokens: int = 256) -> str:
        """The deployed student's answer (through the built-in server)."""
        from app.core.ship import serving

        if serving.state() is None:
            raise SchoolError("no model is served", fix="deploy a checkpoint (nightschool deploy) or start the server")
        reply = serving.chat([{"role": "user", "content": question}], max_tokens=max_tokens)
        return reply["choices"][0]["message"].get("content") or ""

    def evaluate(self, target: Target) -> dict[str, Any]:
        """A checkpoint (or the base model) measured on its held-out set (the caller resolves what the user named)."""
        from app.core.judge.evaluate import choose_set, evaluate

        row, report = evaluate(self.store, target, choose_set(self.store, target, None, None))
        return {"eval": row.id, "label": report.label, "metrics": report.metrics, "contexts": report.contexts}

    # --- the blind test --------------------------------------------------------------------------
    def blind_results(self, judge: str | None = None) -> list[dict[str, Any]]:
        """Each tested model's indistinguishable share with its session-level interval and trial count (the model
        tested last first), with the goal (45 %) and chance (50 %): the School tab's chart, `school status`, MCP."""
        from app.core.judge.blind.figure import results

        return [r.as_dict() for r in results(self.store, judge)]

    def blind_test(self, model: str | None = None, n: int = 20, judge: str = "person", sink: Callable | None = None,
                   cancel: threading.Event | None = None, max_new_tokens: int | None = None) -> BlindTest:
        """The blind test of `model` (None: the deployed student of the policy's base model) to go on with: the
        unfinished one, else a new one of `n` trials, its student answers from the evaluation this machine judges
        with (the policy's judge settings, served decoding: reused from a cycle when it judged the same way;
        `max_new_tokens` over the settings' when named). For the teacher (`judge` "teacher": judge/blind/machine
        answers it), refused before anything is drawn when the teacher cannot be asked."""
        from app.core.judge.blind.draw import model as blind_model
        from app.core.judge.blind.machine import ready
        from app.core.judge.blind.trials import start, unfinished

        if judge == "teacher":
            ready(self.store)
        policy = pol.load(self.store)
        target = blind_model(self.store, model, policy.base_model)
        going = unfinished(self.store, target, judge)
        if going is not None:
            return going
        settings = pol.judge_settings(policy, max_new_tokens=max_new_tokens)
        return start(self.store, target, settings, n, judge, sink, cancel)
