"""Jobs on a real local Ray cluster (the session's shared head, tests/core/train/ray_cluster.py: loopback, 1 CPU, its
own temp dir): a tiny SFT job submitted --on ray streams its events into the run's events.jsonl, its checkpoints come
home sealed and registered; `ray job stop` mid-run resumes from the last checkpoint; the head gone fails the job with
the reason, nothing lost; the cluster's Python lacking a module the engine needs refuses the job up front."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'nightschool[remote]'")

from app.core.base import settings
from app.core.train import checkpoints as ckpt
from app.core.train.backends import BackendError, ray as ray_backend
from app.core.train.backends.remote import ENGINE_MODULES, ENGINE_MODULES_DEFAULT_MODEL
from app.core.train.events import read_events
from tests import ray_head
from tests.conftest import fast_hyper
from tests.core.train import ray_cluster
from tests.engine.helpers import of_type


def _ray(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([str(ray_head.VENV_BIN / "ray"), *args], env=ray_head.env(), capture_output=True,
                          text=True, check=check, timeout=120)


@pytest.fixture(scope="module")
def head(request):
    return ray_cluster.shared(request)


@pytest.fixture
def on_ray(head, store, tmp_path):
    address = head
    storage = tmp_path / "storage"
    storage.mkdir()
    settings.put(store, ray_backend.ADDRESS, address)
    settings.put(store, ray_backend.STORAGE, str(storage))
    settings.put(store, ray_backend.UNREACHABLE_GRACE, 3.0)
    # the cluster's Python check passed before (it runs once per address; test_cli_ray and the test below run it)
    settings.put(store, ray_backend.CHECKED, {address: [*ENGINE_MODULES, *ENGINE_MODULES_DEFAULT_MODEL]})
    return storage


def _wait(predicate, what: str, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:.0f} s"
        time.sleep(0.1)
    return value


def test_a_job_on_ray_streams_resumes_after_ray_job_stop_and_brings_its_checkpoints_home(manager, chat_file,
                                                                                         tiny_model, on_ray):
    # far more steps than the test waits for (the tiny model trains 40 steps in under a second): no command below
    # can arrive after the job has finished; it ends through the relayed "stop"
    job = manager.submit(chat_file, model=str(tiny_model), hyper=fast_hyper(max_steps=5000, save_steps=4),
                         backend="ray")
    run = manager.latest_run(job.id)
    assert run.pid is None and job.state == "running", job.error
    run_dir = Path(run.run_dir)
    remote = manager.remote(run_dir)
    events = lambda: read_events(run_dir / "events.jsonl")  # noqa: E731
    # live: the loss reaches the local events.jsonl while the Ray job runs
    _wait(lambda: of_type(events(), "metrics"), "a loss event streaming home")
    _wait(lambda: ckpt.latest_good(on_ray / job.id / "checkpoints"), "a sealed checkpoint on the storage")
    remote.command(run_dir, "pause")  # relayed through the storage's control file
    _wait(lambda: any(e.body.state == "paused" for e in of_type(events(), "state")), "the remote engine pausing")
    _ray("job", "stop", f"nightschool-{job.id}-1", "--address", remote.address)
    _wait(lambda: not manager.is_alive(run), "the stopped Ray job ending")
    assert manager.reconcile() == [job.id]  # finalise saw a crash and submitted the job again
    runs = manager.runs(job.id)
    assert [r.state for r in runs] == ["crashed", "running"] and runs[1].resume_step is not None
    resumed_from = runs[1].resume_step
    _wait(lambda: any(e.body.step > resumed_from for e in of_type(events(), "checkpoint")),
          "a checkpoint after the resume")
    manager.remote(run_dir).command(run_dir, "stop")
    done = manager.wait(job.id, timeout=150)
    assert done.state == "stopped", done.error
    events = read_events(run_dir / "events.jsonl")
    assert [e.seq for e in events] == sorted({e.seq for e in events})  # each event once, in order
    assert len([e for e in events if e.type == "state" and e.body.state == "starting"]) == 2
    steps = [e.body.step for e in of_type(events, "metrics")]
    assert min(steps) <= resumed_from < max(steps)  # the second attempt went on from the checkpoint
    losses = [e.body.loss for e in of_type(events, "metrics") if e.body.loss is not None]
    assert losses[-1] < losses[0]
    rows = manager.checkpoints(job.id)
    assert {r.kind for r in rows} == {"checkpoint", "adapter"}
    for row in rows:  # registered paths are the copies home, sealed
        assert Path(row.path).resolve().is_relative_to(run_dir.resolve())
        if row.kind == "checkpoint":
            assert ckpt.verify(Path(row.path)) is not None
    # what travelled: the spec and the scrubbed snapshot, nothing else
    assert sorted(p.name for p in (run_dir / "remote-stage").iterdir()) == ["dataset.jsonl", "spec.json"]


def test_the_head_gone_fails_the_job_with_the_reason_and_keeps_everything(manager, chat_file, tiny_model, on_ray,
                                                                          store, monkeypatch):
    job = manager.submit(chat_file, model=str(tiny_model), hyper=fast_hyper(max_steps=200, save_steps=2),
                         backend="ray")
    run = manager.latest_run(job.id)
    run_dir = Path(run.run_dir)
    _wait(lambda: ckpt.latest_good(on_ray / job.id / "checkpoints"), "a sealed checkpoint on the storage")
    backend = manager.remote(run_dir)
    seen = len(read_events(run_dir / "events.jsonl"))
    backend.address = f"http://127.0.0.1:{ray_head.free_port()}"  # stand-in for a head that went away: nothing listens
    backend._client = None
    _wait(lambda: not manager.is_alive(run), "the unreachable head's grace period passing", timeout=30)
    done = manager.finalise(job.id)
    assert done.state == "failed"
    assert "cannot be reached" in done.error and "queue retry" in done.error
    assert len(read_events(run_dir / "events.jsonl")) >= seen  # nothing that came home is lost
    assert ckpt.latest_good(run_dir / "checkpoints") is not None  # the storage's sealed checkpoints came home
    # the real job still runs on the (real) head: end it so the module's head is free for the next test
    from ray.job_submission import JobSubmissionClient

    JobSubmissionClient(settings.get(store, ray_backend.ADDRESS)).stop_job(f"nightschool-{job.id}-1")


def test_the_python_check_names_a_module_the_cluster_lacks_and_remembers_only_a_pass(head, store):
    backend = ray_backend.RayBackend(head, "/unused", store=store)
    with pytest.raises(BackendError) as refused:
        backend.check_python(["json", "surely_missing_pkg_xyz"], timeout=60)
    words = str(refused.value)
    assert "lacks surely_missing_pkg_xyz" in words and "ModuleNotFoundError" in words
    assert f"{ray_head.VENV_BIN / 'python'} -m pip install surely-missing-pkg-xyz" in words  # the cluster's Python
    assert settings.get(store, ray_backend.CHECKED) is None  # a refusal is not remembered: the next job checks again


def test_queue_add_on_ray_records_the_choice_and_a_missing_cluster_says_what_to_set(chat_file, tiny_model, store,
                                                                                    capsys, monkeypatch):
    from app.cli.main import main

    monkeypatch.delenv(ray_backend.ADDRESS_ENV, raising=False)  # no cluster named anywhere
    from app.core.queue.scheduler import Queue
    from app.core.train.backends import choice_of

    assert main(["queue", "add", str(chat_file), "--model", str(tiny_model), "--on", "ray"]) == 0
    q = Queue(store)
    job = q.waiting()[0]
    assert choice_of(Path(job.spec_path).parent) == "ray"
    report = q.tick(scan_inbox=False)
    assert report.failed_to_start and "no Ray cluster is set" in report.failed_to_start[0][1]
    assert "nightschool queue remote ray.address" in report.failed_to_start[0][1]
    assert "RAY_ADDRESS" in report.failed_to_start[0][1]
    # the default for jobs without --on is a setting
    assert main(["queue", "remote", "backend", "skypilot"]) == 0
    assert main(["queue", "add", str(chat_file), "--model", str(tiny_model)]) == 0
    assert choice_of(Path(q.waiting()[0].spec_path).parent) == "skypilot"
    assert main(["queue", "remote", "backend", "slurm"]) == 2
    assert "unknown execution backend" in capsys.readouterr().err
