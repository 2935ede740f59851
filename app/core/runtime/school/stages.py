"""What each cycle stage does. A stage hands work to the existing workers (dataset build, queue jobs, judge, export,
deploy) and returns an outcome; what it started is recorded first, so a restart waits for it instead of starting it
again."""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from app.core.base.store import Store
from app.core.runtime.machinery.bus import Bus, Kind
from app.core.runtime.school import cycles, resources
from app.core.runtime.school.cycles import Cycle
from app.core.runtime.school.policy import Policy, judge_settings
from app.core.train.variants import named

POLL_S = 1.0


@dataclass
class Outcome:
    """next: the stage is done (its output recorded, go on); wait: not yet (with why); refused / failed: the end."""

    kind: str  # done | wait | refused | failed | finished
    output: dict = field(default_factory=dict)
    reason: str = ""


@dataclass
class Ctx:
    store: Store
    bus: Bus
    policy: Policy
    queue: object  # app.core.queue.scheduler.Queue
    stop: threading.Event

    def sink(self, cycle: Cycle, stage: str) -> Callable:
        """A worker's envelopes → `progress` events on the bus (stage, step, total, ETA)."""
        def on(env) -> None:
            if env.type == "progress":
                b = env.body
                self.bus.publish(Kind.CYCLE_PROGRESS, cycle=cycle.id, stage=stage, phase=b.phase, step=b.step,
                                 total=b.total, eta_s=getattr(b, "eta_s", None))
        return on


def building(ctx: Ctx, cycle: Cycle) -> Outcome:
    """The student's own work first (its captured actions offered to the buffer; answers a later teacher session
    contradicts are flagged; the teacher re-answers flagged ones), then the dataset build: what is new for the school
    (sessions and accepted corrections no cycle trained on: a dataset built by hand uses nothing up) and replay."""
    from app.core.datasets.config import BuildConfig, Filters
    from app.core.datasets.runs import start_build

    own = {"offered": offered(ctx), "contradicted": contradicted(ctx), "corrections": corrections(ctx)}
    learned = cycles.learned_from(ctx.store, ctx.policy.base_model)
    config = BuildConfig(base_model=ctx.policy.base_model, mode="auto", max_length=ctx.policy.max_length,
                         test_share=ctx.policy.test_share, learned_from=learned,
                         filters=Filters(near_duplicate=ctx.policy.near_duplicate),
                         name=f"cycle-{cycle.id}-{time.strftime('%Y%m%d-%H%M%S')}",
                         **named(ctx.policy.recipe).build)
    run = start_build(ctx.store, config)
    if run.stream(ctx.sink(cycle, "building"), ctx.stop) is None:
        return Outcome("wait", reason="stopped while building: the build starts again")
    done = run.finish()
    if not done.ok:
        return Outcome("failed", own, reason=f"the dataset build failed: {done.message}")
    if done.identical_to in learned:  # the same examples as a dataset a cycle trained on (one never trained: taken)
        return Outcome("failed", own, reason=f"no new usable sessions or corrections since dataset "
                                             f"{done.identical_to}: nothing to learn")
    return Outcome("done", {"dataset": done.name, "fingerprint": done.fingerprint, "examples": done.examples,
                            **own_examples(ctx, done.name), **members_of(ctx.store, done.name), **own})


def offered(ctx: Ctx) -> dict:
    """The student's own captured work (sessions it acted in) offered to the experience buffer where it is on, before
    the scan and the teacher read the flagged entries (a failure is said, never fatal)."""
    from app.core.datasets.student_work import offer

    try:
        return offer(ctx.store)
    except Exception as exc:  # noqa: BLE001 - a bonus, as the scan: the cycle goes on without it
        return {"offered": 0, "flagged": 0, "error": f"the student's captured work was not offered: {exc}"}


def contradicted(ctx: Ctx) -> dict:
    """Recorded answers a later captured teacher session contradicts, flagged (a failure is said, never fatal)."""
    from app.core.experience.contradictions import scan

    try:
        found = scan(ctx.store)
    except Exception as exc:  # noqa: BLE001 - the scan is a bonus: the cycle goes on without it
        return {"flagged": 0, "error": f"the contradiction scan failed: {exc}"}
    return {"flagged": len(found), "entries": [{"experience_id": c.experience_id, "session_id": c.session_id}
                                               for c in found[:20]]}


def corrections(ctx: Ctx) -> dict:
    """The teacher re-answers flagged entries (its own batch limit, cooldown and budget) when it is configured and
    something is flagged; what it did, or why it did nothing. A teacher failure never fails the cycle."""
    from app.core.experience import teacher
    from app.core.runtime.school.triggers import teacher_idle

    empty = {"tried": 0, "accepted": 0, "waiting": 0, "rejected": 0, "failed": 0}
    try:
        if idle := teacher_idle(ctx.store):
            return {**empty, "stopped_because": idle}
        run = teacher.correct(ctx.store, by="cycle")
    except Exception as exc:  # noqa: BLE001 - the cycle learns from its sessions anyway
        return {**empty, "stopped_because": f"the teacher failed: {exc}"}
    return {"tried": run.tried, "accepted": run.accepted, "waiting": run.waiting, "rejected": run.rejected,
            "failed": run.failed, "stopped_because": run.stopped_because}


def own_examples(ctx: Ctx, dataset: str) -> dict:
    """How many of the dataset's examples and preference pairs came from the student's own work (its manifest)."""
    from app.core.datasets.catalog import Registry

    found = Registry(ctx.store).get(dataset)
    counts = json.loads(found.manifest_json).get("counts", {}) if found else {}
    return {key: counts.get(key, 0) for key in ("from_corrections", "correction_pairs")}


def members_of(store: Store, dataset: str) -> dict:
    """In a team's school: how many of the dataset's sessions each member contributed and how many of them are held
    out (counts, never content; top-level sessions, a sub-agent counts with its parent). Nothing in solo mode."""
    from sqlalchemy import select

    from app.core.base.schema import AgentSession, DatasetSession
    from app.core.datasets.catalog import Registry

    found = Registry(store).get(dataset)
    if found is None:
        return {}
    roots: dict[str, dict[str, set]] = {}
    with store.engine.connect() as conn:
        for sid, parent, member, split in conn.execute(
                select(AgentSession.id, AgentSession.parent_id, AgentSession.member, DatasetSession.split)
                .join(DatasetSession, DatasetSession.session_id == AgentSession.id)
                .where(DatasetSession.dataset_id == found.id, AgentSession.member.is_not(None))):
            seen = roots.setdefault(member, {"sessions": set(), "held_out": set()})
            seen["sessions"].add(parent or sid)
            if split == "test":
                seen["held_out"].add(parent or sid)
    if not roots:
        return {}
    return {"members": {m: {k: len(v) for k, v in seen.items()} for m, seen in sorted(roots.items())}}


def _dataset(ctx: Ctx, cycle: Cycle):
    from app.core.datasets.catalog import Registry

    return Registry(ctx.store).get(cycle.outputs["building"]["dataset"])


def _job_of(ctx: Ctx, cycle: Cycle, stage: str):
    """The job this stage submitted (found by its source tag, so a crash between submit and record loses nothing)."""
    from sqlalchemy import select

    from app.core.base.schema import Job

    with ctx.store.session() as s:
        return s.scalars(select(Job).where(Job.source == f"cycle:{cycle.id}:{stage}").order_by(Job.created_at)).first()


def _submit(ctx: Ctx, cycle: Cycle, stage: str, file: Path, kind: str, init_adapter: str | None) -> Outcome | None:
    """Queue the stage's training job once; None when it was queued (now or before)."""
    from app.core.runtime.school import night
    from app.core.train.spec import Budget

    if _job_of(ctx, cycle, stage) is not None:
        return None
    waiting = resources.before_training(ctx.policy, ctx.store, ctx.bus)
    if waiting:
        return Outcome("wait", reason=waiting)
    hyper = job_hyper(ctx.policy, kind)
    ds = _dataset(ctx, cycle)
    planned = night.plan(ctx.policy, ctx.store)  # the night's time: until the window closes, less judging's
    stored = cycles.get(ctx.store, cycle.id)  # the stored outputs (mining may have added to them since)
    cycles.update(ctx.store, cycle.id, outputs={**stored.outputs, f"{stage}_plan": planned.as_dict()})
    ctx.queue.add(file, kind=kind, priority="high", model=ds.base_model, hyper=hyper,
                  source=f"cycle:{cycle.id}:{stage}", init_adapter=init_adapter,
                  budget=Budget(wall_clock_min=planned.minutes),
                  backend=None if ctx.policy.train_on == "default" else ctx.policy.train_on)
    return None


def job_hyper(policy: Policy, kind: str):
    """A cycle job's hyper-parameters over the recipe's: the named recipe's (SFT only), then the policy's `hyper`,
    then its `max_steps`; None when nothing is set (the recipe's own)."""
    from app.core.train.spec import Hyper

    recipe = named(policy.recipe).hyper if kind == "sft" else {}
    over = {**recipe, **policy.hyper, **({"max_steps": policy.max_steps} if policy.max_steps else {})}
    return Hyper(**over) if over else None


def _wait_job(ctx: Ctx, cycle: Cycle, stage: str) -> Outcome:
    """Until the stage's job ends: its checkpoint, or why it failed."""
    from app.core.judge.records import of_job

    while not ctx.stop.is_set():
        job = _job_of(ctx, cycle, stage)
        if job.state in ("completed", "stopped"):
            target = of_job(ctx.store, job.id)
            return Outcome("done", {"job": job.id, "checkpoint": target.id, "adapter": target.adapter,
                                    "steps": _result_steps(job.id)})
        if job.state in ("failed", "cancelled"):
            return Outcome("failed", reason=f"the {stage} job {job.id} {job.state}: {(job.error or '').strip()}")
        ctx.stop.wait(POLL_S)
    return Outcome("wait", reason="stopped while training: the job goes on and is followed again at the next start")


def _result_steps(job_id: str) -> int | None:
    from app.core.base import paths

    path = paths.runs_dir() / job_id / "result.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("metrics", {}).get("steps")
    except (OSError, ValueError):
        return None


def training(ctx: Ctx, cycle: Cycle) -> Outcome:
    """SFT on the new dataset, starting from the deployed adapter so learning accumulates (replay is in the data)."""
    from app.core.judge.deployment import deployed_target

    ds = _dataset(ctx, cycle)
    deployed = deployed_target(ctx.store, ds.base_model)
    refused = _submit(ctx, cycle, "training", Path(ds.path) / "train.jsonl", "sft",
                      deployed.adapter if deployed is not None else None)
    if refused is not None:
        return refused
    try:
        out = _wait_job(ctx, cycle, "training")
    finally:
        if not ctx.stop.is_set():
            resources.after_training(ctx.store, ctx.bus)
    if out.kind == "done":
        out.output["from_adapter"] = deployed.adapter if deployed is not None else None
        out.output["plan"] = cycles.get(ctx.store, cycle.id).outputs.get("training_plan")
    return out


def refines(policy: Policy, cycle_number: int) -> bool:
    return policy.refine_every > 0 and cycle_number % policy.refine_every == 0


def refining(ctx: Ctx, cycle: Cycle) -> Outcome:
    """Every k-th cycle: mine preference pairs where the SFT student disagrees with the teacher (beside them the
    blind test's pairs a person judged, the corrections and the dropped files: datasets/pairs, by source in its
    report), then DPO on top (policy `preference`), or GRPO with the behavioural reward on the new contexts (policy
    `rl`)."""
    sft = cycle.outputs["training"]
    ds = _dataset(ctx, cycle)
    if ctx.policy.refine == "rl":
        file, kind = Path(ds.path) / "train.jsonl", "grpo"
    else:
        pairs = cycle.outputs.get("mining") or _mine(ctx, cycle, ds, sft["adapter"])
        if "error" in pairs:
            return Outcome("failed", reason=pairs["error"])
        if not pairs.get("pairs"):
            return Outcome("done", {"skipped": "the student agreed with the teacher on every mined context"})
        file, kind = Path(pairs["path"]) / "train.jsonl", "dpo"
    refused = _submit(ctx, cycle, "refining", file, kind, sft["adapter"])
    if refused is not None:
        return refused
    try:
        return _wait_job(ctx, cycle, "refining")
    finally:
        if not ctx.stop.is_set():
            resources.after_training(ctx.store, ctx.bus)


def _mine(ctx: Ctx, cycle: Cycle, ds, adapter: str) -> dict:
    from app.core.datasets.catalog import Registry
    from app.core.datasets.pairs import PairsConfig
    from app.core.datasets.runs import start_pairs

    run = start_pairs(ctx.store, PairsConfig(base_model=ds.base_model, adapter=adapter, source=ds.name,
                                             name=f"cycle-{cycle.id}-pairs"))
    run.stream(ctx.sink(cycle, "refining"), ctx.stop)
    done = run.finish()
    if not done.ok:
        return {"error": f"mining preference pairs failed: {done.message}"}
    found = Registry(ctx.store).get(done.name)
    mined = {"dataset": done.name, "pairs": done.examples, "path": found.path if found else ""}
    cycles.update(ctx.store, cycle.id, outputs={**cycle.outputs, "mining": mined})
    return mined


def judging(ctx: Ctx, cycle: Cycle) -> Outcome:
    from app.core.judge.promote import judge
    from app.core.judge.records import by_id

    ref = _candidate(cycle)
    settings = judge_settings(ctx.policy)
    judged = judge(ctx.store, by_id(ctx.store, ref), settings=settings, sink=ctx.sink(cycle, "judging"),
                   cancel=ctx.stop)
    out = {"checkpoint": ref, "evaluator": settings.evaluator, "evaluated": judged.evaluated,
           "verdict": judged.verdict.verdict, "verdict_id": judged.row.id,
           "reasons": judged.verdict.reasons, "evals": {"candidate": judged.row.eval_id,
                                                       "base": judged.row.base_eval_id,
                                                       "deployed": judged.row.deployed_eval_id},
           "metrics": {name: r.metrics for name, r in judged.reports.items()},
           "checks": [c.model_dump() for c in judged.verdict.checks], "notes": judged.verdict.notes}
    if judged.verdict.verdict != "pass":  # fail, or inconclusive: not enough evidence that it is better
        why = "fail" if judged.verdict.verdict == "fail" else "inconclusive: no evidence that it is better"
        return Outcome("refused", out, reason=f"the gate refused the candidate ({why}): "
                                              + "; ".join(judged.verdict.reasons))
    return Outcome("done", out)


def _candidate(cycle: Cycle) -> int:
    refined = cycle.outputs.get("refining") or {}
    return refined.get("checkpoint") or cycle.outputs["training"]["checkpoint"]


def exporting(ctx: Ctx, cycle: Cycle) -> Outcome:
    from app.core.judge.records import by_id
    from app.core.ship.deploy import verified
    from app.core.ship.exports import export

    ref = cycle.outputs["judging"]["checkpoint"]
    exp = export(ctx.store, by_id(ctx.store, ref), [ctx.policy.quant], sink=ctx.sink(cycle, "exporting"),
                 cancel=ctx.stop)
    entry = verified(exp, ctx.policy.quant)  # a file that failed its smoke test (e.g. it rambles) ends the cycle here
    gguf = _served_check(ctx, cycle, ref, exp.path(ctx.policy.quant))
    if ctx.stop.is_set():
        return Outcome("wait", reason="stopped while judging the exported file: the export is reused, the file judged "
                                      "again")
    return Outcome("done", {"export": exp.row.id, "file": entry["file"], "sha256": entry["sha256"],
                            "quant": ctx.policy.quant, "gguf": gguf})


def _served_check(ctx: Ctx, cycle: Cycle, ref: int, path: Path) -> dict:
    """The exported file judged through llama.cpp on the current held-out set with the judging stage's settings,
    beside the checkpoint's own figures, and flagged when it loses too much (a failure is recorded, not fatal)."""
    from app.core.judge.evaluate import choose_set
    from app.core.judge.gguf import served_vs_trained, settings_of
    from app.core.judge.records import JudgeError, by_id

    try:
        target = by_id(ctx.store, ref)
        settings = settings_of(ctx.store, (cycle.outputs["judging"].get("evals") or {}).get("candidate"))
        return served_vs_trained(ctx.store, target, path, choose_set(ctx.store, target), ctx.policy.quant, settings,
                                 sink=ctx.sink(cycle, "exporting"), cancel=ctx.stop)
    except JudgeError as exc:
        return {"error": str(exc)}


def deploying(ctx: Ctx, cycle: Cycle) -> Outcome:
    """auto: deploy now; ask: wait for approval (or refusal); never: the export is the cycle's result."""
    from app.core.judge.records import by_id
    from app.core.ship.deploy import deploy

    decision = cycle.inputs.get("approval")
    if ctx.policy.deploy == "never" and decision is None:
        return Outcome("finished", {"deployed": None, "why": "the deploy policy is `never`: exported only"})
    if decision == "refused":
        return Outcome("finished", {"deployed": None, "why": "the deployment was refused by the user"})
    if ctx.policy.deploy == "ask" and decision != "approved":
        return Outcome("wait", reason="waiting for approval to deploy")
    ref = cycle.outputs["judging"]["checkpoint"]
    done = deploy(ctx.store, by_id(ctx.store, ref), ctx.policy.quant, sink=ctx.sink(cycle, "deploying"),
                  cancel=ctx.stop, port=ctx.policy.port)
    return Outcome("finished", {"deployed": done.row.id, "checkpoint": ref, "sha256": done.row.sha256,
                                "file": done.row.file})


RUN = {"building": building, "training": training, "refining": refining, "judging": judging,
       "exporting": exporting, "deploying": deploying}
