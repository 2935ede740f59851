"""Jobs: create (check data + model, snapshot, spec), launch the engine subprocess, reconcile, finalise."""
from __future__ import annotations

import secrets
import subprocess
import time
from datetime import datetime
from pathlib import Path

from sqlalchemy import func, select, update

from app.core.base import paths, procs, protocol as P
from app.core.base.fingerprint import code_hash
from app.core.base.schema import CheckpointRow, Job, Run, utcnow
from app.core.base.store import Store
from app.core.datafiles.chatfile import DatasetError, check_chat_file, write_snapshot
from app.core.datasets.catalog import Registry
from app.core.train import backends, checkpoints as ckpt
from app.core.train.engine_client import EngineClient, Follower
from app.core.train.events import last_of, read_events
from app.core.train.modelref import check_model_ref
from app.core.train.results import ResultRefused, validate
from app.core.train.spec import DATA_FORMAT, DEFAULT_MODEL, RECIPES, Budget, Hyper, JobSpec, Lineage
from app.core.train.view import WAITING_STATES, waiting_words

ACTIVE = ("starting", "running")
MAX_AUTO_RESUMES = 10  # crashes a job may resume from
MAX_CRASHES_WITHOUT_PROGRESS = 3  # crashes in a row that resumed from the same checkpoint
STDERR_TAIL_LINES = 25


def new_job_id() -> str:
    return f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


class JobManager:
    """Owns the lifecycle of jobs in one store. Engine processes outlive it (they are in their own session)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._procs: dict[str, subprocess.Popen] = {}
        self._remotes: dict[str, object] = {}  # run dir -> its remote backend (Ray, SkyPilot); local jobs: none

    def remote(self, run_dir: str | Path):
        """The backend running this run dir's job remotely (one object per job: it holds the log stream), or None."""
        key = str(run_dir)
        if key not in self._remotes:
            self._remotes[key] = backends.remote_for(run_dir, self.store)
        return self._remotes[key]

    # --- create ------------------------------------------------------------------------------
    def submit(self, dataset: str | Path, model: str = DEFAULT_MODEL, hyper: Hyper | None = None,
               start: bool = True, *, kind: str = "sft", eval_data: str | Path | None = None,
               budget: Budget | None = None, dry_run: bool = False, init_adapter: str | None = None,
               priority: str = "normal", lineage: Lineage | None = None, processes: int = 1,
               backend: str | None = None) -> Job:
        """Check the file(s) and the model, snapshot the usable records into a new run dir, write the spec."""
        backend = backends.check_name(backend or backends.default_name(self.store))  # a backends.BACKENDS name
        paths.engine_python()  # a packaged app with no engine configured says so before anything is made
        if kind not in RECIPES:
            raise DatasetError(f"unknown recipe {kind!r}: choose one of {', '.join(RECIPES)}")
        fmt = DATA_FORMAT[kind]
        report = check_chat_file(dataset, fmt)
        eval_report = check_chat_file(eval_data, fmt) if eval_data else None
        check_model_ref(model)
        job_id = new_job_id()
        run_dir = paths.runs_dir() / job_id
        run_dir.mkdir(parents=True)
        dataset_sha = write_snapshot(report, run_dir / "dataset.jsonl", run_dir / "quarantine.jsonl")
        eval_sha = write_snapshot(eval_report, run_dir / "eval.jsonl", run_dir / "eval-quarantine.jsonl") \
            if eval_report else None
        spec = JobSpec(job_id=job_id, kind=kind, dataset_path=str(run_dir / "dataset.jsonl"),
                       dataset_sha256=dataset_sha, eval_path=str(run_dir / "eval.jsonl") if eval_report else None,
                       eval_sha256=eval_sha, model=model, init_adapter=init_adapter,
                       models_dir=str(paths.models_dir()), run_dir=str(run_dir),
                       socket_path=str(paths.socket_path(run_dir, job_id)), token=secrets.token_urlsafe(24),
                       hyper=hyper or Hyper(), budget=budget or Budget(), dry_run=dry_run, processes=processes)
        spec.lineage = self._lineage(lineage or Lineage(), dataset, dataset_sha).model_copy(update={
            "config_fingerprint": spec.config_fingerprint(), "code_hash": code_hash()})
        spec_path = run_dir / "spec.json"
        spec_sha = spec.write(spec_path)
        backends.record_choice(run_dir, backend)
        with self.store.session() as s:
            last = s.scalar(select(func.max(Job.position))) or 0.0
            job = Job(id=job_id, kind=kind, priority=priority, position=last + 1.0,
                      config_fingerprint=spec.lineage.config_fingerprint, dataset_path=str(Path(dataset).resolve()),
                      dataset_sha256=dataset_sha, model_ref=model, spec_path=str(spec_path), spec_sha256=spec_sha,
                      records=len(report.records),
                      error=f"{len(report.problems)} line(s) set aside, see quarantine.jsonl"
                      if report.problems else None)
            s.add(job)
        if start:
            try:
                self.launch(job_id)
            except (OSError, paths.SetupError, backends.BackendError) as exc:
                self._mark_failed(job_id, f"the engine could not be started: {exc}. Check the installation "
                                          "(bash packaging/install.sh) or NIGHTSCHOOL_ENGINE_PYTHON.")
        return self.job(job_id)

    def _lineage(self, lineage: Lineage, dataset: str | Path, dataset_sha: str) -> Lineage:
        """A job on a built dataset's file records that dataset's name and fingerprint (its sessions follow)."""
        if not lineage.dataset_name and (built := Registry(self.store).of_file(dataset)) is not None:
            lineage = lineage.model_copy(update={"dataset_name": built.name, "dataset_fingerprint": built.fingerprint})
        if not lineage.dataset_fingerprint:
            lineage = lineage.model_copy(update={"dataset_fingerprint": dataset_sha})
        return lineage

    def _mark_failed(self, job_id: str, error: str) -> None:
        with self.store.session() as s:
            job = s.get(Job, job_id)
            job.state, job.error = "failed", error

    # --- run ---------------------------------------------------------------------------------
    def launch(self, job_id: str) -> Run:
        """Start the engine for a job in its own session, so closing or killing the GUI leaves it running."""
        job = self.job(job_id)
        spec, _ = JobSpec.read(Path(job.spec_path))
        run_dir = Path(spec.run_dir)
        resume = ckpt.latest_good(run_dir / "checkpoints")
        if (remote := self.remote(run_dir)) is not None:
            return self._launch_remote(job_id, remote, spec, run_dir, resume)
        with (run_dir / "engine.out").open("ab") as out, (run_dir / "engine.err").open("ab") as err:
            proc = subprocess.Popen(engine_command(spec, job.spec_path),
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                                    cwd=paths.engine_cwd(), env=paths.child_env())
        self._procs[job_id] = proc
        with self.store.session() as s:
            run = Run(job_id=job_id, run_dir=str(run_dir), socket_path=spec.socket_path, pid=proc.pid,
                      pid_started=procs.start_time(proc.pid), state="running",
                      resume_step=resume.step if resume else None)
            s.add(run)
            s.get(Job, job_id).state = "running"
        return self.latest_run(job_id)

    def _launch_remote(self, job_id: str, remote, spec: JobSpec, run_dir: Path, resume) -> Run:
        """Hand the job to its remote backend; the run has no local pid (the backend answers is_alive)."""
        remote.start(spec, run_dir)
        with self.store.session() as s:
            s.add(Run(job_id=job_id, run_dir=str(run_dir), socket_path=spec.socket_path, pid=None, pid_started=None,
                      state="running", resume_step=resume.step if resume else None))
            s.get(Job, job_id).state = "running"
        return self.latest_run(job_id)

    def is_alive(self, run: Run) -> bool:
        """Whether the run's engine process still runs (pid + start time guard against pid reuse); a remote job's
        backend answers for it."""
        if (remote := self.remote(run.run_dir)) is not None:
            return remote.alive(Path(run.run_dir))
        proc = self._procs.get(run.job_id)
        if proc is not None and proc.poll() is not None:
            return False
        return procs.live_process(run.pid, run.pid_started) is not None

    def reconcile(self) -> list[str]:
        """Finalise every job whose engine has exited; return their ids."""
        done = []
        for job in self.jobs(states=ACTIVE):
            run = self.latest_run(job.id)
            if run is None or not self.is_alive(run):
                self.finalise(job.id)
                done.append(job.id)
        return done

    def wait(self, job_id: str, timeout: float = 600.0) -> Job:
        """Block until the job's engine exits, then finalise it (CLI and tests)."""
        deadline = time.monotonic() + timeout
        run = self.latest_run(job_id)
        while self.is_alive(run):
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still running after {timeout:.0f}s")
            time.sleep(0.2)
        return self.finalise(job_id)

    # --- finish ------------------------------------------------------------------------------
    def finalise(self, job_id: str) -> Job:
        """Validate the result fail-closed; register checkpoints only for a valid result."""
        job = self.job(job_id)
        if job.state not in ACTIVE:
            return job
        run = self.latest_run(job_id)
        proc = self._procs.pop(job_id, None)
        exit_code = proc.wait() if proc else None
        run_dir = Path(run.run_dir)
        unreachable = None  # a remote job whose cluster cannot be reached: it fails with the reason, nothing lost
        if (remote := self.remote(run_dir)) is not None:
            exit_code, unreachable = remote.finish(job_id, run_dir, job.spec_sha256)
        result_file = run_dir / "result.json"
        events = read_events(run_dir / "events.jsonl")
        state, error, raw = "failed", None, None
        spec, _ = JobSpec.read(Path(job.spec_path))
        if spec.dry_run:
            return self._end_dry_run(job_id, run.id, run_dir, exit_code, events)
        died = not result_file.is_file() and crashed(events)
        if died and unreachable is None and self._may_resume(job_id):
            return self._resume_after_crash(job_id, run.id, exit_code)
        if result_file.is_file():
            raw = result_file.read_text(encoding="utf-8")
            spec, spec_sha = JobSpec.read(Path(job.spec_path))
            try:
                if spec_sha != job.spec_sha256:
                    raise ResultRefused(["the spec file changed after the job was created"])
                state = validate(raw, spec, job.spec_sha256).status
            except ResultRefused as exc:
                error = str(exc)
        else:
            error = failure_message(events, run_dir)
            if unreachable:
                error = (f"{unreachable}. Nothing is lost: the events so far are here and the sealed checkpoints stay "
                         "on the storage; `nightschool queue retry` resumes from the last one once the cluster is "
                         f"back. {error}")
            if died and len(self.runs(job_id)) > 1:
                error = (f"the engine died {len(self.runs(job_id))} times, the last {MAX_CRASHES_WITHOUT_PROGRESS} "
                         "without passing a new checkpoint, so it is not restarted again (retry it from the queue "
                         f"once the cause is fixed). {error}")
        self._record_end(job_id, run.id, state, error, raw, exit_code, events)
        return self.job(job_id)

    def _may_resume(self, job_id: str) -> bool:
        """Auto-resume a crashed engine unless it keeps crashing: at most MAX_AUTO_RESUMES per job, and no more
        after MAX_CRASHES_WITHOUT_PROGRESS crashes in a row that resumed from the same checkpoint."""
        runs = self.runs(job_id)
        if sum(r.state == "crashed" for r in runs) >= MAX_AUTO_RESUMES:
            return False
        tail = [runs[-1].resume_step]  # the run that just died, then the crashed ones before it
        for r in reversed(runs[:-1]):
            if r.state != "crashed":
                break
            tail.append(r.resume_step)
        n = MAX_CRASHES_WITHOUT_PROGRESS
        return not (len(tail) >= n and len(set(tail[:n])) == 1)

    def _resume_after_crash(self, job_id: str, run_id: int, exit_code: int | None) -> Job:
        """The engine died without a word (killed, OOM, power): record it and start it again; it resumes from
        the last good checkpoint by itself."""
        with self.store.session() as s:
            claimed = s.execute(update(Run).where(Run.id == run_id, Run.state == "running")
                                .values(state="crashed", exit_code=exit_code, ended_at=utcnow(),
                                        error=f"the engine died (exit code {exit_code}); resumed automatically"))
            if claimed.rowcount != 1:
                return self.job(job_id)  # another process saw it first and resumed it
        try:
            self.launch(job_id)
        except (OSError, paths.SetupError) as exc:
            self._mark_failed(job_id, f"the engine crashed and could not be restarted: {exc}")
        return self.job(job_id)

    def _end_dry_run(self, job_id, run_id, run_dir: Path, exit_code, events) -> Job:
        plan_file = run_dir / "plan.json"
        raw = plan_file.read_text(encoding="utf-8") if plan_file.is_file() else None
        plan = P.Plan.model_validate_json(raw) if raw else None
        state = "validated" if plan and plan.ok else "failed"
        error = None if state == "validated" else ("; ".join(plan.problems) if plan
                                                   else failure_message(events, run_dir))
        with self.store.session() as s:
            claimed = s.execute(update(Job).where(Job.id == job_id, Job.state.in_(ACTIVE)).values(state=state))
            if claimed.rowcount == 1:
                job, run = s.get(Job, job_id), s.get(Run, run_id)
                job.error = error
                run.state, run.error, run.exit_code, run.result_json, run.ended_at = state, error, exit_code, raw, \
                    utcnow()
        return self.job(job_id)

    def _record_end(self, job_id, run_id, state, error, raw, exit_code, events) -> None:
        """Claim the job, register the run's checkpoints, then mark the run ended: the store refuses a completed
        run without a registered checkpoint (migration 0005's trigger), so the order is the registry's rule."""
        with self.store.session() as s:
            claimed = s.execute(update(Job).where(Job.id == job_id, Job.state.in_(ACTIVE)).values(state=state))
            if claimed.rowcount != 1:
                return  # another process (GUI, CLI) finalised this job first
            job, run = s.get(Job, job_id), s.get(Run, run_id)
            if state == "failed":
                job.error = error  # on success the note about set-aside lines stays
            else:
                self._register_checkpoints(s, job_id, run_id, events, P.Result.model_validate_json(raw))
                s.flush()
            run.state = state
            run.error, run.exit_code, run.result_json, run.ended_at = error, exit_code, raw, utcnow()

    @staticmethod
    def _register_checkpoints(s, job_id: str, run_id: int, events, result: P.Result) -> None:
        known = set(s.scalars(select(CheckpointRow.path).join(Run).where(Run.job_id == job_id)))
        for env in events:  # every attempt's checkpoints that retention kept, each registered once
            path = env.body.path if env.type == "checkpoint" else None
            if path and path not in known and ckpt.verify(Path(path)) is not None:
                known.add(path)
                s.add(CheckpointRow(run_id=run_id, step=env.body.step, kind="checkpoint", path=path))
        s.add(CheckpointRow(run_id=run_id, step=int(result.metrics.get("steps") or 0), kind="adapter",
                            path=result.adapter_path, sha256=result.adapter_sha256))

    def follower(self, job_id: str, sink) -> Follower:
        """A Follower that replays this job's latest run and streams it live while its engine runs.

        A job with no run yet (queued, held, being launched) is followed too: the follower says what the job waits
        for and follows the first run that appears. One that ended before any run (a backend that refused it at
        launch: its error says what to set) ends the follow at once; the caller reads the job's error. A remote job
        has no socket here: its events file is tailed, and while its cluster has not started it, that is said."""
        job = self.job(job_id)
        spec, _ = JobSpec.read(Path(job.spec_path))
        followed = [self.latest_run(job_id)]
        where = backends.choice_of(spec.run_dir)
        socket_path = followed[0].socket_path if followed[0] is not None else spec.socket_path
        client = EngineClient(socket_path, spec.token, job_id) if where == "local" else None

        def run_now() -> Run | None:
            if followed[0] is None:
                followed[0] = self.latest_run(job_id)
            return followed[0]

        def alive() -> bool:
            state = self.job(job_id).state  # read before the run: launch adds the run and leaves these at once
            if followed[0] is None and state in WAITING_STATES:
                return True
            run = run_now()
            return run is not None and self.is_alive(run)

        def waiting() -> str | None:
            if run_now() is None:
                return waiting_words(self.job(job_id), where)
            remote = self.remote(followed[0].run_dir) if where != "local" else None
            return remote.waiting(Path(followed[0].run_dir)) if hasattr(remote, "waiting") else None

        return Follower(Path(spec.run_dir) / "events.jsonl", client, sink, alive, waiting)

    # --- queries -----------------------------------------------------------------------------
    def job(self, job_id: str) -> Job:
        with self.store.session() as s:
            job = s.get(Job, job_id)
            if job is None:
                raise KeyError(f"no job {job_id!r}; `nightschool jobs` lists them")
            return job

    def jobs(self, states: tuple[str, ...] | None = None) -> list[Job]:
        with self.store.session() as s:
            q = select(Job).order_by(Job.created_at.desc())
            if states:
                q = q.where(Job.state.in_(states))
            return list(s.scalars(q))

    def runs(self, job_id: str) -> list[Run]:
        with self.store.session() as s:
            return list(s.scalars(select(Run).where(Run.job_id == job_id).order_by(Run.id)))

    def latest_run(self, job_id: str) -> Run | None:
        with self.store.session() as s:
            return s.scalars(select(Run).where(Run.job_id == job_id).order_by(Run.id.desc())).first()

    def checkpoints(self, job_id: str) -> list[CheckpointRow]:
        with self.store.session() as s:
            q = select(CheckpointRow).join(Run).where(Run.job_id == job_id).order_by(CheckpointRow.id)
            return list(s.scalars(q))


def crashed(events: list) -> bool:
    """The latest engine attempt ended without a result, an error or a fatal alert: it was killed."""
    start = max((i for i, e in enumerate(events) if e.type == "state" and e.body.state == "starting"), default=0)
    for env in events[start:]:
        if env.type in ("result", "error", "plan"):
            return False
        if env.type == "alert" and getattr(env.body, "severity", "") == "fatal":
            return False
    return True


def engine_command(spec: JobSpec, spec_path: str) -> list[str]:
    """`python -m engine --spec FILE`, or through `accelerate launch` for a job with several processes."""
    python = paths.engine_python()
    if spec.processes <= 1:
        return [python, "-m", "engine", "--spec", spec_path]
    return [python, "-m", "accelerate.commands.launch", *paths.accelerate_args(spec.processes),
            "-m", "engine", "--spec", spec_path]


def failure_message(events, run_dir: Path) -> str:
    """What the engine said before it died, plus the tail of its stderr."""
    err = last_of(events, "error")
    head = (f"{err.body.message}. {err.body.why} {err.body.fix}".strip() if err
            else "the engine exited without a result")
    tail = stderr_tail(run_dir)
    return f"{head}\n--- engine stderr (last lines) ---\n{tail}" if tail else head


def stderr_tail(run_dir: Path, lines: int = STDERR_TAIL_LINES) -> str:
    path = run_dir / "engine.err"
    if not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return "\n".join(text[-lines:])

