"""The queue: order and priority, one job at a time, pause/resume, cancel, retry that resumes, ETAs, and a restart of
the app that loses nothing. Real engines on the tiny model; dry runs where a job only has to end."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from app.core.base.schema import Job, Run, utcnow
from app.core.base.store import Store
from app.core.queue import eta
from app.core.queue.scheduler import LAUNCHING, STALE_LAUNCH_S, EngineUnreachable, Queue, QueueError
from app.core.train.jobs import JobManager
from tests.conftest import fast_hyper, write_jsonl
from tests.engine.helpers import of_type, states, wait_for_events

DEADLINE_S = 240.0
REPO = Path(__file__).resolve().parents[3]
# One scheduler process for the race below: it opens the store, says "ready", starts ticking when told, and prints
# the jobs it launched (no engine starts; every launch is also appended to a log both write). Its first launch waits
# until the other process has launched a job too, so the two ticks overlap whatever the OS schedules first.
RACING_SCHEDULER = r"""
import json, sys, time
from sqlalchemy import func, select
from app.core.base.schema import Job
from app.core.base.store import Store
from app.core.queue.scheduler import LAUNCHING, Queue

limit = int(sys.argv[1])
queue = Queue(Store(), inbox=False)
launched = []

def claimed():
    with queue.store.session() as s:
        return s.scalar(select(func.count()).select_from(Job).where(Job.state == LAUNCHING))

def launch(job_id):
    launched.append(job_id)
    with open(sys.argv[2], "a") as log:
        log.write(job_id + "\n")
    deadline = time.monotonic() + 30
    while len(launched) == 1 and len(open(sys.argv[2]).read().split()) < 2:
        if time.monotonic() > deadline:
            sys.exit("the other scheduler launched no job while this one was launching")
        time.sleep(0.01)

queue.manager.launch = launch
print("ready", flush=True)
sys.stdin.readline()
while claimed() < limit:
    queue.tick(scan_inbox=False)
assert queue.tick(scan_inbox=False).started == [], "a tick started a job beyond the limit"
print(json.dumps(launched), flush=True)
"""


@pytest.fixture
def queue(store):
    return Queue(store, inbox=False)


def add(queue, data, model, priority="normal", dry_run=True, **hyper) -> str:
    return queue.add(data, priority=priority, model=str(model), hyper=fast_hyper(**hyper), dry_run=dry_run).id


def run_until(queue, done, what: str, timeout: float = DEADLINE_S) -> None:
    """Tick the scheduler (as the GUI's timer does) until done() holds."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout:.0f} s; queue: "
                                 f"{[(e.job.id, e.state) for e in queue.entries()]}")
        queue.tick(scan_inbox=False)
        time.sleep(0.1)


def state_of(queue, job_id) -> str:
    return queue.manager.job(job_id).state


def record_launches(queue, monkeypatch, start: bool = True) -> list[str]:
    """The launch order; every launch also checks that no more than max_concurrent jobs are busy. With
    start=False no engine starts: the job stays claimed (`launching`) until the test ends it."""
    launched, real = [], queue.manager.launch

    def launch(job_id):
        launched.append(job_id)
        assert len(queue.busy()) <= queue.max_concurrent()
        return real(job_id) if start else None

    monkeypatch.setattr(queue.manager, "launch", launch)
    return launched


# --- order -------------------------------------------------------------------------------------
def test_priority_then_fifo_order_and_reordering(queue, chat_file, tiny_model):
    low, n1, n2, high = (add(queue, chat_file, tiny_model, p) for p in ("low", "normal", "normal", "high"))
    assert [j.id for j in queue.waiting()] == [high, n1, n2, low]
    entries = queue.entries()
    assert [(e.job.id, e.place, e.state) for e in entries] == [
        (high, 1, "queued"), (n1, 2, "queued"), (n2, 3, "queued"), (low, 4, "queued")]
    starts = [e.starts_in_s for e in entries]
    assert starts[0] == 0.0 and starts == sorted(starts) and all(e.eta_s > 0 for e in entries)

    queue.set_priority(low, "high")  # it keeps its age within its new priority: the oldest high job
    assert [j.id for j in queue.waiting()] == [low, high, n1, n2]
    queue.move(n2, before=high)  # between two high jobs: it takes their priority
    assert [j.id for j in queue.waiting()] == [low, n2, high, n1] and queue.manager.job(n2).priority == "high"
    queue.move(low, before=n1)
    assert [j.id for j in queue.waiting()] == [n2, high, low, n1] and queue.manager.job(low).priority == "normal"
    queue.to_top(n1)
    assert [j.id for j in queue.waiting()] == [n1, n2, high, low] and queue.manager.job(n1).priority == "high"
    queue.move(n1)  # no `before`: to the end
    assert [j.id for j in queue.waiting()] == [n2, high, low, n1]
    with pytest.raises(QueueError, match="unknown priority"):
        queue.set_priority(n1, "urgent")


def test_each_row_says_where_its_job_trains(queue, chat_file, tiny_model):
    """A job queued for a Ray cluster says so in its row (chosen when queued, kept in its run dir); others run here."""
    here = add(queue, chat_file, tiny_model)
    there = queue.add(chat_file, model=str(tiny_model), hyper=fast_hyper(), dry_run=True, backend="ray").id
    assert {e.job.id: e.on for e in queue.entries()} == {here: "local", there: "ray"}


def test_many_moves_to_the_same_place_keep_the_order(queue, chat_file, tiny_model):
    a, b, c = (add(queue, chat_file, tiny_model) for _ in range(3))
    for _ in range(60):  # halving the gap runs out of float precision: positions are renumbered
        queue.move(c, before=b)
        queue.move(b, before=c)
    assert [j.id for j in queue.waiting()] == [a, b, c]


def test_the_scheduler_starts_jobs_in_run_order_one_at_a_time(queue, chat_file, tiny_model, monkeypatch):
    low, n1, n2, high, last = (add(queue, chat_file, tiny_model, p) for p in ("low", "normal", "normal", "high", "low"))
    queue.move(last, before=n1)  # reordered: now the first normal job
    launched = record_launches(queue, monkeypatch, start=False)
    for _ in range(3):
        assert len(queue.tick().started) == 1 and queue.tick().started == []  # one at a time
        queue.update_job(launched[-1], state="completed")  # as if its engine had ended
    queue.set_max_concurrent(2)
    assert len(queue.tick().started) == 2
    assert launched == [high, last, n1, n2, low]


def test_two_scheduler_processes_racing_on_one_store_start_each_job_once(queue, chat_file, tiny_model, tmp_path):
    """Two processes tick the same SQLite store at the same time: every job is started by exactly one of them, the
    first ones in run order, and no more than max_concurrent in all."""
    limit = 20
    ids = [add(queue, chat_file, tiny_model) for _ in range(24)]
    queue.set_max_concurrent(limit)
    log = tmp_path / "launches.log"
    procs = [subprocess.Popen([sys.executable, "-c", RACING_SCHEDULER, str(limit), str(log)], cwd=REPO, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    try:
        for proc in procs:  # both have imported everything and opened the store
            assert proc.stdout.readline().strip() == "ready", proc.communicate()[1]
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=60) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [proc.returncode for proc in procs] == [0, 0], [err for _, err in outputs]
    launched = [json.loads(out.splitlines()[-1]) for out, _ in outputs]
    assert all(launched), launched  # both schedulers started jobs: it was a race
    started = log.read_text().split()
    assert sorted(started) == sorted(job_id for each in launched for job_id in each)
    twice = sorted(job_id for job_id in set(started) if started.count(job_id) > 1)
    assert sorted(started) == sorted(ids[:limit]), f"started twice: {twice}; by each: {launched}"  # once each
    assert [state_of(queue, job_id) for job_id in ids] == [LAUNCHING] * limit + ["queued"] * (len(ids) - limit)


def test_a_claimed_job_is_not_started_again_until_its_claim_goes_stale(queue, chat_file, tiny_model, monkeypatch):
    """Two schedulers in this process, ticking in turn: the claim keeps the other off the job; a claim whose
    launch never happened (its scheduler died) is queued again and claimed again."""
    other = Queue(Store(), inbox=False)
    ids = [add(queue, chat_file, tiny_model) for _ in range(3)]
    first, second = record_launches(queue, monkeypatch, start=False), record_launches(other, monkeypatch, start=False)
    queue.tick(), other.tick(), queue.tick()
    assert first + second == [ids[0]] and state_of(queue, ids[0]) == LAUNCHING
    with queue.store.session() as s:  # a scheduler that died between claim and launch: the claim goes stale
        s.execute(update(Job).where(Job.id == ids[0]).values(
            updated_at=utcnow() - timedelta(seconds=STALE_LAUNCH_S + 5)))
    other.tick()
    assert second == [ids[0]]  # queued again, then claimed again (first in line)
    other.store.close()


# --- pause / resume ----------------------------------------------------------------------------
def test_pause_the_queue_and_a_running_job(queue, chat_file, tiny_model):
    # steps enough that the pause lands before the end on a loaded machine (8 steps once ended first; the tiny model
    # trains ~40 a second)
    job = add(queue, chat_file, tiny_model, dry_run=False, max_steps=200, save_steps=10**6)
    queue.pause()
    assert queue.tick().started == [] and state_of(queue, job) == "queued"
    assert queue.entries()[0].starts_in_s is None  # nothing starts while paused
    queue.resume()
    assert queue.tick().started == [job]
    run = queue.manager.latest_run(job)
    alive = lambda: queue.manager.is_alive(run)  # noqa: E731
    wait_for_events(run.run_dir, lambda ev: len(of_type(ev, "metrics")) >= 2, alive=alive)

    queue.pause(job)
    events = wait_for_events(run.run_dir, lambda ev: states(ev)[-1] == "paused", alive=alive)
    paused_seq = of_type(events, "state")[-1].seq
    entry = queue.entries()[0]
    assert entry.state == "paused" and entry.step is not None and entry.total == 200
    queue.tick()
    assert state_of(queue, job) == "running"  # a paused engine is not an ended one
    queue.resume(job)
    events = wait_for_events(run.run_dir, lambda ev: any(e.seq > paused_seq for e in of_type(ev, "metrics")),
                             alive=alive)
    resumed = [e for e in of_type(events, "state") if e.seq > paused_seq]
    between = [e for e in of_type(events, "metrics") if paused_seq < e.seq < resumed[0].seq]
    assert resumed[0].body.state == "running" and not between
    run_until(queue, lambda: state_of(queue, job) != "running", "the resumed job ends")
    assert state_of(queue, job) == "completed"


def test_a_queued_job_can_be_held_and_released(queue, chat_file, tiny_model, monkeypatch):
    a, b = add(queue, chat_file, tiny_model), add(queue, chat_file, tiny_model)
    launched = record_launches(queue, monkeypatch, start=False)
    queue.pause(a)
    queue.tick()
    assert launched == [b] and state_of(queue, a) == "held"
    assert next(e for e in queue.entries() if e.job.id == a).starts_in_s is None
    queue.resume(a)
    assert state_of(queue, a) == "queued"
    with pytest.raises(QueueError, match="only a failed, stopped or cancelled"):
        queue.retry(a)


# --- cancel / retry ----------------------------------------------------------------------------
def test_cancel_a_running_job_then_retry_resumes_from_its_checkpoint(queue, chat_file, tiny_model):
    job = add(queue, chat_file, tiny_model, dry_run=False, max_steps=100, save_steps=5)  # ends well after the cancel
    assert queue.tick().started == [job]
    run = queue.manager.latest_run(job)
    wait_for_events(run.run_dir, lambda ev: of_type(ev, "checkpoint"), alive=lambda: queue.manager.is_alive(run))

    queue.cancel(job)
    assert state_of(queue, job) == "cancelled" and not queue.manager.is_alive(run)
    queue.tick()  # the engine died without a result: a cancelled job is not auto-resumed
    assert state_of(queue, job) == "cancelled" and [r.state for r in _runs(queue, job)] == ["cancelled"]

    queue.retry(job)
    assert state_of(queue, job) == "queued"
    assert queue.tick().started == [job]
    rerun = queue.manager.latest_run(job)
    assert rerun.id != run.id and rerun.resume_step is not None and rerun.resume_step >= 5
    run_until(queue, lambda: state_of(queue, job) != "running", "the retried job ends")
    assert state_of(queue, job) == "completed", queue.manager.job(job).error
    result = json.loads((Path(rerun.run_dir) / "result.json").read_text())
    assert result["metrics"]["steps"] == 100 and rerun.resume_step in result["resumed_from"]
    assert len(_runs(queue, job)) == 2


def test_a_job_that_failed_to_start_can_be_retried(queue, chat_file, tiny_model, monkeypatch):
    job = add(queue, chat_file, tiny_model)
    monkeypatch.setenv("NIGHTSCHOOL_ENGINE_PYTHON", "/nonexistent/python")
    report = queue.tick()
    assert [j for j, _ in report.failed_to_start] == [job] and state_of(queue, job) == "failed"
    assert "could not be started" in queue.manager.job(job).error
    queue.retry(job)  # tests/cli/test_cli_queue.py runs such a retry to its end
    assert state_of(queue, job) == "queued" and queue.manager.job(job).error is None


def test_retry_sets_the_old_result_aside_and_fresh_the_checkpoints_too(queue, chat_file, tiny_model, ns_home):
    job = add(queue, chat_file, tiny_model)
    queue.stop(job)  # a waiting job just ends
    assert state_of(queue, job) == "stopped"
    run_dir = ns_home / "runs" / job
    with queue.store.session() as s:  # as if it had run and been stopped with a checkpoint
        s.add(run := Run(job_id=job, run_dir=str(run_dir), socket_path="x", state="stopped"))
    (run_dir / "checkpoints" / "checkpoint-5").mkdir(parents=True)
    (run_dir / "result.json").write_text("{}")
    queue.retry(job)
    assert not (run_dir / "result.json").exists() and (run_dir / f"result.run{run.id}.json").is_file()
    assert (run_dir / "checkpoints" / "checkpoint-5").is_dir()  # resumed from
    queue.stop(job)
    queue.retry(job, fresh=True)
    assert not (run_dir / "checkpoints").exists() and (run_dir / f"checkpoints.run{run.id}").is_dir()
    assert state_of(queue, job) == "queued"


# --- restart -----------------------------------------------------------------------------------
def test_a_restart_of_the_app_loses_nothing_and_runs_nothing_twice(chat_file, tiny_model):
    """Queued low, normal, high: high starts; the app quits and starts again; the running job is re-attached and
    the others start after it, one at a time, in priority order (FIFO within a priority: the scheduler test)."""
    store = Store()
    queue = Queue(store, JobManager(store), inbox=False)
    low, normal = add(queue, chat_file, tiny_model, "low"), add(queue, chat_file, tiny_model, "normal")
    high = add(queue, chat_file, tiny_model, "high", dry_run=False, max_steps=100, save_steps=10**6)  # still running
    assert queue.tick().started == [high]
    run = queue.manager.latest_run(high)
    wait_for_events(run.run_dir, lambda ev: "loading" in states(ev))
    del queue
    store.close()  # the app quits; the engine (its own session) trains on

    store = Store()
    queue = Queue(store, JobManager(store), inbox=False)  # the app starts again on the same data dir
    assert state_of(queue, high) == "running" and queue.manager.is_alive(queue.manager.latest_run(high))
    assert [(e.job.id, e.state) for e in queue.entries()] == [
        (high, "running"), (normal, "queued"), (low, "queued")]
    assert queue.tick().started == []  # re-attached: the running job holds the one slot
    order = [high, normal, low]
    run_until(queue, lambda: all(state_of(queue, j) not in ("queued", "launching", "running") for j in order),
              "every job ends")
    assert [state_of(queue, j) for j in order] == ["completed", "validated", "validated"]
    runs = [_runs(queue, j) for j in order]
    assert all(len(r) == 1 for r in runs)  # nothing ran twice
    for before, after in zip(runs, runs[1:]):  # in order, never two at once
        assert before[0].ended_at <= after[0].started_at
    store.close()


def _runs(queue, job_id) -> list[Run]:
    from sqlalchemy import select

    with queue.store.session() as s:
        return list(s.scalars(select(Run).where(Run.job_id == job_id).order_by(Run.id)))


# --- ETA ---------------------------------------------------------------------------------------
def test_eta_from_tokens_and_measured_throughput(queue, tiny_model, tmp_path):
    records = [{"messages": [{"role": "user", "content": "x" * 40}, {"role": "assistant", "content": "y" * 40}]}] * 10
    data = write_jsonl(tmp_path / "d.jsonl", records)
    job = queue.add(data, model=str(tiny_model), hyper=fast_hyper(max_steps=1000, epochs=2))
    entry = queue.entries()[0]
    # 10 records x 20 tokens (80 characters / 4) x 2 epochs at the default throughput, plus the engine's start
    assert entry.eta_s == pytest.approx(eta.STARTUP_S + 400 / eta.DEFAULT_TOKENS_PER_S)
    capped = queue.add(data, model=str(tiny_model), hyper=fast_hyper(max_steps=1, batch_size=2, epochs=2))
    with queue.store.session() as s:  # a completed run of this model measured 100 tokens/s
        s.add(Run(job_id=capped.id, run_dir="x", socket_path="x", state="completed",
                  result_json=json.dumps({"metrics": {"tokens_per_s": 100.0}})))
    first, second = queue.entries()[:2]
    assert first.job.id == job.id and first.eta_s == pytest.approx(eta.STARTUP_S + 400 / 100)
    assert second.eta_s == pytest.approx(eta.STARTUP_S + 40 / 100)  # 1 step x 2 examples x 20 tokens
    assert second.starts_in_s == pytest.approx(first.eta_s)


def test_token_counts_use_input_ids_when_present_and_start_times_fill_slots():
    assert eta.record_tokens({"input_ids": [1] * 17, "messages": []}, "chat") == 17
    assert eta.record_tokens({"prompt": "abcd" * 3, "chosen": "ab", "rejected": "cd"}, "preference") == 4
    assert eta.start_times([30.0], [10.0, 10.0], 1) == [30.0, 40.0]
    assert eta.start_times([30.0], [10.0, 10.0, 10.0], 2) == [0.0, 10.0, 20.0]
    assert eta.start_times([], [5.0], 1) == [0.0]


def test_live_progress_comes_from_the_tail_of_the_events(tmp_path):
    from app.core.base import protocol as P

    path = tmp_path / "events.jsonl"
    lines = [P.make(P.State(state="running"), seq=1), *[P.make(P.Progress(step=i, total=50, eta_s=50.0 - i), seq=i + 1)
                                                       for i in range(1, 2000)]]
    path.write_text("".join(P.dumps(e) + "\n" for e in lines) + '{"half": ', encoding="utf-8")
    now = eta.live(path)
    assert (now.step, now.total, now.eta_s, now.phase) == (1999, 50, 50.0 - 1999, "train")
    assert eta.live(tmp_path / "missing.jsonl") == eta.Live()


def test_unknown_jobs_and_wrong_states_are_refused_with_what_to_do(queue, chat_file, tiny_model):
    with pytest.raises(QueueError, match="nightschool jobs"):
        queue.pause("no-such-job")
    job = add(queue, chat_file, tiny_model)
    queue.cancel(job)
    with pytest.raises(QueueError, match="cancelled"):
        queue.stop(job)
    with pytest.raises(QueueError, match="not waiting"):
        queue.move(add(queue, chat_file, tiny_model), before=job)


def test_a_command_to_an_engine_that_is_gone_is_refused_clearly(queue, chat_file, tiny_model, tmp_path):
    job = add(queue, chat_file, tiny_model)
    with queue.store.session() as s:  # the row says running, but no engine listens (it died a moment ago)
        s.add(Run(job_id=job, run_dir=str(tmp_path), socket_path=str(tmp_path / "gone.sock"), state="running"))
    queue.update_job(job, state="running")
    with pytest.raises(EngineUnreachable, match="not running"):
        queue.pause(job)
