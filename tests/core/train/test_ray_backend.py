"""Jobs on a real local Ray cluster (a head this module starts: loopback, 1 CPU, its own temp dir): a tiny SFT job
submitted --on ray streams its events into the run's events.jsonl, its checkpoints come home sealed and registered;
`ray job stop` mid-run resumes from the last checkpoint; the head gone fails the job with the reason, nothing lost."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'nightschool[remote]'")

from app.core.base import settings  # noqa: E402
from app.core.train import checkpoints as ckpt  # noqa: E402
from app.core.train.backends import ray as ray_backend  # noqa: E402
from app.core.train.events import read_events  # noqa: E402
from tests.conftest import fast_hyper  # noqa: E402
from tests.engine.helpers import of_type  # noqa: E402

VENV_BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray(*args: str, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "ray"), *args], env=env, capture_output=True, text=True, check=check,
                          timeout=120)


def _start_head(tmp: Path) -> tuple[str, dict]:
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", "RAY_USAGE_STATS_ENABLED": "0"}
    dash = _free_port()
    _ray("start", "--head", "--temp-dir", str(tmp), "--num-cpus", "1", "--node-ip-address", "127.0.0.1",
         "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash), "--port", str(_free_port()),
         "--ray-client-server-port", str(_free_port()), "--min-worker-port", "0", "--max-worker-port", "0",
         "--include-dashboard", "true", "--disable-usage-stats", env=env)
    address = f"http://127.0.0.1:{dash}"
    from ray.job_submission import JobSubmissionClient

    deadline = time.monotonic() + 60
    while True:  # the job API comes up a moment after `ray start` returns
        try:
            JobSubmissionClient(address).list_jobs()
            return address, env
        except Exception:  # noqa: BLE001
            assert time.monotonic() < deadline, "the Ray head's job API did not come up"
            time.sleep(0.5)


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    tmp = Path("/tmp") / f"ns-ray-{os.getpid()}"  # Ray's socket paths must stay short
    shutil.rmtree(tmp, ignore_errors=True)
    address, env = _start_head(tmp)
    yield address, env
    _ray("stop", "--force", env=env, check=False)
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def on_ray(head, store, tmp_path):
    address, _ = head
    storage = tmp_path / "storage"
    storage.mkdir()
    settings.put(store, ray_backend.ADDRESS, address)
    settings.put(store, ray_backend.STORAGE, str(storage))
    settings.put(store, ray_backend.UNREACHABLE_GRACE, 3.0)
    return storage


def _wait(predicate, what: str, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:.0f} s"
        time.sleep(0.1)
    return value


def test_a_job_on_ray_streams_its_events_and_brings_its_checkpoints_home(manager, chat_file, tiny_model, on_ray):
    job = manager.submit(chat_file, model=str(tiny_model), hyper=fast_hyper(max_steps=12, save_steps=6),
                         backend="ray")
    run = manager.latest_run(job.id)
    assert run.pid is None and job.state == "running", job.error
    run_dir = Path(run.run_dir)
    # live: the loss reaches the local events.jsonl while the Ray job runs
    _wait(lambda: of_type(read_events(run_dir / "events.jsonl"), "metrics"), "a loss event streaming home")
    done = manager.wait(job.id, timeout=120)
    assert done.state == "completed", done.error
    events = read_events(run_dir / "events.jsonl")
    losses = [e.body.loss for e in of_type(events, "metrics") if e.body.loss is not None]
    assert len(losses) >= 10 and losses[-1] < losses[0]
    seqs = [e.seq for e in events]
    assert seqs == sorted(set(seqs))  # each event once, in order
    rows = manager.checkpoints(job.id)
    kinds = {r.kind for r in rows}
    assert kinds == {"checkpoint", "adapter"}
    for row in rows:  # registered paths are the copies home, sealed
        assert Path(row.path).resolve().is_relative_to(run_dir.resolve())
        if row.kind == "checkpoint":
            assert ckpt.verify(Path(row.path)) is not None
    # what travelled: the spec and the scrubbed snapshot, nothing else
    assert sorted(p.name for p in (run_dir / "remote-stage").iterdir()) == ["dataset.jsonl", "spec.json"]


def test_ray_job_stop_mid_run_resumes_from_the_last_checkpoint(manager, chat_file, tiny_model, on_ray, head):
    _, env = head
    job = manager.submit(chat_file, model=str(tiny_model), hyper=fast_hyper(max_steps=40, save_steps=4),
                         backend="ray")
    run = manager.latest_run(job.id)
    run_dir = Path(run.run_dir)
    remote_dir = on_ray / job.id
    _wait(lambda: ckpt.latest_good(remote_dir / "checkpoints"), "a sealed checkpoint on the storage")
    sid = f"nightschool-{job.id}-1"
    _ray("job", "stop", sid, "--address", manager.remote(run_dir).address, env=env)
    _wait(lambda: not manager.is_alive(run), "the stopped Ray job ending")
    assert manager.reconcile() == [job.id]  # finalise saw a crash and submitted the job again
    runs = manager.runs(job.id)
    assert [r.state for r in runs] == ["crashed", "running"] and runs[1].resume_step is not None
    done = manager.wait(job.id, timeout=150)
    assert done.state == "completed", done.error
    starts = [e for e in read_events(run_dir / "events.jsonl") if e.type == "state" and e.body.state == "starting"]
    assert len(starts) == 2


def test_the_head_gone_fails_the_job_with_the_reason_and_keeps_everything(manager, chat_file, tiny_model, on_ray,
                                                                          store, monkeypatch):
    job = manager.submit(chat_file, model=str(tiny_model), hyper=fast_hyper(max_steps=200, save_steps=4),
                         backend="ray")
    run = manager.latest_run(job.id)
    run_dir = Path(run.run_dir)
    _wait(lambda: ckpt.latest_good(on_ray / job.id / "checkpoints"), "a sealed checkpoint on the storage")
    backend = manager.remote(run_dir)
    seen = len(read_events(run_dir / "events.jsonl"))
    backend.address = "http://127.0.0.1:%d" % _free_port()  # stand-in for a head that went away: nothing listens
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
