"""The training queue: one scheduler over the jobs table (priorities, FIFO within, pause, stop, retry, reorder)."""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func, select, update
from sqlalchemy.orm import aliased

from app.core.base import paths, settings
from app.core.base.errors import Explained
from app.core.base.schema import Job, Run, utcnow
from app.core.base.store import Store
from app.core.queue import eta
from app.core.queue.control import EngineUnreachable, send_command, terminate
from app.core.queue.inbox import DEFAULTS_KEY, Inbox, Submit
from app.core.queue.view import Entry, QueueState, age_s, build_entries
from app.core.train.jobs import ACTIVE, JobManager
from app.core.train.spec import DEFAULT_MODEL, Hyper, JobSpec

PRIORITIES = ("high", "normal", "low")
RANK = {p: i for i, p in enumerate(PRIORITIES)}
LAUNCHING = "launching"  # claimed by a scheduler that is starting its engine (not yet ACTIVE)
WAITING = ("queued", "held")  # held: a queued job the user paused; it does not start until resumed
BUSY = (*ACTIVE, LAUNCHING)
FINISHED = ("completed", "failed", "stopped", "cancelled", "validated")
RETRYABLE = ("failed", "stopped", "cancelled")
PAUSED_KEY, CONCURRENT_KEY = "queue.paused", "queue.max_concurrent"
STALE_LAUNCH_S = 120.0  # a claim older than this whose launch never happened goes back to queued
FINISHED_SHOWN = 20

__all__ = ["Queue", "Entry", "TickReport", "QueueError", "EngineUnreachable", "PRIORITIES"]


class QueueError(Explained, ValueError):
    """A queue action that cannot be done now; the message says why and what to do."""


@dataclass
class TickReport:
    started: list[str] = field(default_factory=list)
    ended: list[tuple[str, str]] = field(default_factory=list)  # (job id, final state)
    failed_to_start: list[tuple[str, str]] = field(default_factory=list)  # (job id, why)
    inbox: list = field(default_factory=list)  # inbox.Outcome per file taken


class Queue:
    """Both the GUI (tick from a timer on a worker thread) and the CLI drive jobs through this."""

    def __init__(self, store: Store, manager: JobManager | None = None, inbox: bool = True) -> None:

        self.store = store
        self.manager = manager or JobManager(store)
        self.inbox = Inbox(Submit(add=self.add, move_data=lambda job_id, path: self.update_job(job_id, dataset_path=path),
                                  defaults=lambda: self.setting(DEFAULTS_KEY, {}), store=store)) if inbox else None

    # --- settings ----------------------------------------------------------------------------
    def setting(self, key: str, default=None):
        return settings.get(self.store, key, default)

    def set_setting(self, key: str, value) -> None:
        settings.put(self.store, key, value)

    def paused(self) -> bool:
        return bool(self.setting(PAUSED_KEY, False))

    def max_concurrent(self) -> int:
        return max(int(self.setting(CONCURRENT_KEY, 1)), 1)

    def set_max_concurrent(self, n: int) -> None:
        if n < 1:
            raise QueueError("at least one job must be allowed to run")
        self.set_setting(CONCURRENT_KEY, int(n))

    # --- add ---------------------------------------------------------------------------------
    def add(self, file: str | Path, *, kind: str = "sft", priority: str = "normal", model: str = DEFAULT_MODEL,
            hyper: Hyper | None = None, eval_data: str | Path | None = None, dry_run: bool = False,
            source: str = "user", **submit_args) -> Job:
        """Check and snapshot the file, and queue the job at the end of its priority (it does not start here).
        Refusals raise DatasetError / ModelRefError with their message."""
        _check_priority(priority)
        job = self.manager.submit(file, model, hyper, start=False, kind=kind, eval_data=eval_data,
                                  dry_run=dry_run, priority=priority, **submit_args)
        if source != job.source:
            self.update_job(job.id, source=source)
        return self.manager.job(job.id)

    # --- schedule ----------------------------------------------------------------------------
    def tick(self, scan_inbox: bool = True) -> TickReport:
        """Finalise ended engines (a crashed one resumes), take inbox files, start what may start. Idempotent,
        and safe when several processes tick the same store: a job is claimed before it is launched."""
        report = TickReport()
        for job_id in self.manager.reconcile():
            state = self.manager.job(job_id).state
            if state not in ACTIVE:
                report.ended.append((job_id, state))
        self._recover_stale_claims()
        if scan_inbox and self.inbox is not None:
            report.inbox = self.inbox.scan()
        while not self.paused() and (job_id := self._claim_next()) is not None:
            self._launch(job_id, report)
        return report

    def refresh(self) -> list[str]:
        """Finalise ended engines without starting anything (for read-only views)."""
        return self.manager.reconcile()

    def _claim_next(self) -> str | None:
        limit = self.max_concurrent()
        for job in self.waiting():
            if len(self.busy()) >= limit:
                return None
            if job.state == "queued" and self._claim(job.id, limit):
                return job.id
        return None

    def _claim(self, job_id: str, limit: int) -> bool:
        """queued -> launching in one statement, only while fewer than `limit` jobs are busy. Claims are serialised
        across processes: SQLite by its one writer, PostgreSQL by the queue's advisory lock (taken first, so the busy
        count the statement reads already sees every claim committed before; a row lock alone would let two
        schedulers each claim a different job past the limit)."""
        other = aliased(Job)
        busy = select(func.count()).select_from(other).where(other.state.in_(BUSY)).scalar_subquery()
        stmt = (update(Job).where(Job.id == job_id, Job.state == "queued", busy < limit)
                .values(state=LAUNCHING, updated_at=utcnow()).execution_options(synchronize_session=False))
        with self.store.session() as s:
            self.store.lock(s, "queue")
            return s.execute(stmt).rowcount == 1

    def _launch(self, job_id: str, report: TickReport) -> None:
        try:
            self.manager.launch(job_id)
            report.started.append(job_id)
        except (OSError, ValueError, paths.SetupError) as exc:
            from app.core.train.backends import BackendError

            if isinstance(exc, BackendError):  # a remote backend refused (its settings, the cluster's Python)
                why = f"the job could not be started: {exc} Then: nightschool queue retry {job_id}"
            else:
                why = (f"the engine could not be started: {exc}. Check the installation (bash packaging/install.sh) "
                       "or NIGHTSCHOOL_ENGINE_PYTHON, then `nightschool queue retry`")
            self.update_job(job_id, state="failed", error=why)
            report.failed_to_start.append((job_id, why))

    def _recover_stale_claims(self) -> None:
        """A scheduler that died between claiming and launching leaves `launching`: queue it again."""
        for job in self._jobs((LAUNCHING,)):
            if age_s(job.updated_at) > STALE_LAUNCH_S:
                self._transition(job.id, (LAUNCHING,), state="queued")

    # --- views -------------------------------------------------------------------------------
    def waiting(self) -> list[Job]:
        """Queued and held jobs in run order: priority, then position."""
        return sorted(self._jobs(WAITING), key=lambda j: (RANK.get(j.priority, 1), j.position, j.created_at))

    def busy(self) -> list[Job]:
        return sorted(self._jobs(BUSY), key=lambda j: (j.updated_at or j.created_at).replace(tzinfo=None))

    def entries(self, finished: int = FINISHED_SHOWN) -> list[Entry]:
        """Running jobs, then waiting ones in run order (with ETAs), then the most recent finished ones."""
        state = QueueState(self.busy(), self.waiting(), self.finished(finished) if finished > 0 else [], self.paused(),
                           self.max_concurrent())
        return build_entries(state, self.manager.latest_run, lambda model: eta.throughput(self.store, model))

    def finished(self, limit: int = FINISHED_SHOWN) -> list[Job]:
        with self.store.session() as s:
            q = select(Job).where(Job.state.in_(FINISHED)).order_by(Job.updated_at.desc()).limit(limit)
            return list(s.scalars(q))

    # --- pause / resume / stop / cancel --------------------------------------------------------
    def pause(self, job_id: str | None = None) -> str:
        """No id: pause the queue (nothing new starts; running jobs go on). A queued job is held; a running
        job's engine pauses between steps (and says so)."""
        if job_id is None:
            self.set_setting(PAUSED_KEY, True)
            return "queue paused: nothing new starts; running jobs go on"
        job = self._job(job_id)
        if job.state in ACTIVE:
            self.command(job, "pause")
            return f"job {job_id} paused (its engine waits between steps)"
        self._transition(job_id, WAITING, state="held", what="hold")
        return f"job {job_id} held: it will not start until resumed"

    def resume(self, job_id: str | None = None) -> str:
        if job_id is None:
            self.set_setting(PAUSED_KEY, False)
            return "queue resumed"
        job = self._job(job_id)
        if job.state in ACTIVE:
            self.command(job, "resume")
            return f"job {job_id} resumed"
        self._transition(job_id, ("held", "queued"), state="queued", what="resume")
        return f"job {job_id} queued again"

    def stop(self, job_id: str) -> str:
        """A running job saves a checkpoint and its adapter and ends as stopped; a waiting one just ends."""
        job = self._job(job_id)
        if job.state in ACTIVE:
            self.command(job, "stop")
            return f"job {job_id} is stopping: it saves a checkpoint and its adapter, then ends as stopped"
        self._transition(job_id, WAITING, state="stopped", what="stop")
        return f"job {job_id} stopped before it started"

    def cancel(self, job_id: str) -> str:
        """A waiting job is cancelled; a running one is marked cancelled first (so it is not auto-resumed), then
        its engine is ended (SIGTERM, SIGKILL after a grace period). Its checkpoints stay for a retry."""
        job = self._job(job_id)
        if job.state not in ACTIVE:
            self._transition(job_id, WAITING, state="cancelled", what="cancel")
            return f"job {job_id} cancelled"
        self._transition(job_id, ACTIVE, state="cancelled", what="cancel")
        run = self.manager.latest_run(job_id)
        if run is not None and (remote := self.manager.remote(run.run_dir)) is not None:
            remote.cancel(Path(run.run_dir))  # a remote job is ended through its cluster, not a local signal
            code = None
        else:
            code = terminate(run) if run is not None else None
        if run is not None:
            self._end_run(run.id, code)
        return f"job {job_id} cancelled; its engine has ended (checkpoints kept: `nightschool queue retry`)"

    def _end_run(self, run_id: int, exit_code: int | None) -> None:
        with self.store.session() as s:
            run = s.get(Run, run_id)
            if run.ended_at is None:
                run.state, run.ended_at, run.exit_code, run.error = "cancelled", utcnow(), exit_code, "cancelled"

    def command(self, job: Job, command: str):
        """Send a command (pause, resume, stop, checkpoint_now) to the job's running engine; its ack, or
        EngineUnreachable with what to do."""
        run = self.manager.latest_run(job.id)
        if (remote := self.manager.remote(run.run_dir)) is not None:
            return remote.command(Path(run.run_dir), command)  # relayed by the remote wrapper (no synchronous ack)
        spec, _ = JobSpec.read(Path(job.spec_path))
        return send_command(run.socket_path, spec.token, job.id, command,
                            alive=lambda: self.manager.is_alive(run))

    # --- retry -------------------------------------------------------------------------------
    def retry(self, job_id: str, fresh: bool = False) -> str:
        """Queue a failed, stopped or cancelled job again at the end of its priority, in the same run dir: the
        engine resumes from the latest good checkpoint (fresh=True sets the old checkpoints aside first)."""
        job = self._job(job_id)
        run = self.manager.latest_run(job_id)
        if job.state not in RETRYABLE:
            raise QueueError(f"job {job_id} is {job.state}: only a failed, stopped or cancelled job can be retried")
        if run is not None and self.manager.is_alive(run):
            raise QueueError(f"job {job_id}'s engine is still shutting down; try again in a moment")
        if run is not None:
            _set_aside(Path(run.run_dir), f"run{run.id}", fresh)
        error = None if job.state == "failed" else job.error
        self._transition(job_id, RETRYABLE, state="queued", error=error, position=self._last_position() + 1.0,
                         what="retry")
        return f"job {job_id} queued again" + (" from scratch" if fresh else " (it resumes from its last checkpoint)")

    # --- order -------------------------------------------------------------------------------
    def set_priority(self, job_id: str, priority: str) -> str:
        _check_priority(priority)
        self._transition(job_id, WAITING, priority=priority, what="change the priority of")
        return f"job {job_id} is now {priority} priority"

    def move(self, job_id: str, before: str | None = None) -> str:
        """Move a waiting job before another one (taking that job's priority), or to the end with before=None
        (taking the last job's priority)."""
        order = [j for j in self.waiting() if j.id != job_id]
        job = self._job(job_id)
        if job.state not in WAITING:
            raise QueueError(f"job {job_id} is {job.state}: only queued or held jobs can be moved")
        if before is None:
            last = order[-1] if order else job
            prio, pos = last.priority, (last.position + 1.0 if order else job.position)
        else:
            prio, pos = self._slot_before(order, before)
        self._transition(job_id, WAITING, priority=prio, position=pos, what="move")
        return f"job {job_id} moved"

    def to_top(self, job_id: str) -> str:
        order = [j for j in self.waiting() if j.id != job_id]
        return self.move(job_id, before=order[0].id) if order else f"job {job_id} is already first"

    def _slot_before(self, order: list[Job], before: str) -> tuple[str, float]:
        ids = [j.id for j in order]
        if before not in ids:
            raise QueueError(f"job {before} is not waiting in the queue: `nightschool queue list` shows the order")
        i = ids.index(before)
        target = order[i]
        prev = order[i - 1] if i > 0 and order[i - 1].priority == target.priority else None
        pos = (prev.position + target.position) / 2 if prev else target.position - 1.0
        if prev is not None and not prev.position < pos < target.position:  # floats ran out: renumber
            self._renumber(order)
            return self._slot_before(self.waiting(), before)
        return target.priority, pos

    def _renumber(self, order: list[Job]) -> None:
        with self.store.session() as s:
            for i, job in enumerate(order):
                s.get(Job, job.id).position = float(i + 1) * 2.0

    # --- helpers -----------------------------------------------------------------------------
    def _job(self, job_id: str) -> Job:
        try:
            return self.manager.job(job_id)
        except KeyError as exc:
            raise QueueError(exc.args[0]) from None

    def _jobs(self, states: tuple[str, ...]) -> list[Job]:
        with self.store.session() as s:
            return list(s.scalars(select(Job).where(Job.state.in_(states))))

    def _last_position(self) -> float:
        with self.store.session() as s:
            return s.scalar(select(func.max(Job.position))) or 0.0

    def update_job(self, job_id: str, **values) -> None:
        """Set columns of a job row as they are (no state check)."""
        with self.store.session() as s:
            s.execute(update(Job).where(Job.id == job_id).values(**values, updated_at=utcnow()))

    def _transition(self, job_id: str, from_states: tuple[str, ...], what: str = "change", **values) -> None:
        """Set values only while the job is in one of from_states (another process may have moved it)."""
        stmt = (update(Job).where(Job.id == job_id, Job.state.in_(from_states))
                .values(**values, updated_at=utcnow()).execution_options(synchronize_session=False))
        with self.store.session() as s:
            if s.execute(stmt).rowcount == 1:
                return
        state = self._job(job_id).state
        hint = "it is starting; try again in a moment" if state == LAUNCHING else \
            f"that needs a job that is {' or '.join(from_states)}"
        raise QueueError(f"cannot {what} job {job_id}: it is {state}; {hint}")


def _check_priority(priority: str) -> None:
    if priority not in RANK:
        raise QueueError(f"unknown priority {priority!r}: choose {', '.join(PRIORITIES)}")


def _set_aside(run_dir: Path, tag: str, fresh: bool) -> None:
    """Before a retry: the old result/plan must not be mistaken for the new run's (and, fresh, no resuming)."""
    names = ["result.json", "plan.json"] + (["checkpoints", "resumes.json"] if fresh else [])
    for name in names:
        src = run_dir / name
        if src.exists():
            shutil.move(str(src), str(_free(run_dir / f"{src.stem}.{tag}{src.suffix}")))


def _free(path: Path) -> Path:
    """path, or path with -2, -3 … before its suffix when taken."""
    n, candidate = 2, path
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        n += 1
    return candidate
