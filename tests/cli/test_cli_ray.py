"""`nightschool train FILE --on ray` driven as a user runs it (the `nightschool` command, a subprocess), the cluster
named only by $RAY_ADDRESS, as Ray's own tools name one: with a storage set it checks the cluster's Python once,
trains on the session's real local Ray head (tests/core/train/ray_cluster.py) and registers the checkpoints; with
no storage it ends at once, non-zero, saying what to set (never a traceback), and `nightschool attach` says the same."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from app.core.base import settings
from app.core.train.backends import ray as ray_backend
from app.core.train.backends.remote import ENGINE_MODULES
from app.core.train.jobs import JobManager
from tests import ray_head
from tests.core.train import ray_cluster


@pytest.fixture(scope="module")
def head(request):
    return ray_cluster.shared(request)


def nightschool(*args: str, ray_address: str) -> subprocess.CompletedProcess:
    env = {**ray_head.env(), ray_backend.ADDRESS_ENV: ray_address}
    env.pop("DISPLAY", None)
    return subprocess.run([str(ray_head.VENV_BIN / "nightschool"), *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=300)


def test_train_on_a_cluster_named_by_RAY_ADDRESS_checks_its_python_once_and_trains(head, store, chat_file,
                                                                                    tiny_model, tmp_path):
    storage = tmp_path / "storage"
    storage.mkdir()
    settings.put(store, ray_backend.STORAGE, str(storage))  # and no ray.address setting: $RAY_ADDRESS names it
    out = nightschool("train", chat_file, "--model", tiny_model, "--max-steps", 2, "--batch-size", 2, "--on", "ray",
                      ray_address=head)
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert "Traceback" not in said
    manager = JobManager(store)
    (job,) = manager.jobs()
    assert job.state == "completed", job.error
    assert f"job {job.id} completed" in out.stdout
    assert settings.get(store, ray_backend.ADDRESS) is None
    assert set(ENGINE_MODULES) <= set(settings.get(store, ray_backend.CHECKED)[head])  # checked, passed, remembered
    rows = manager.checkpoints(job.id)
    assert {r.kind for r in rows} == {"checkpoint", "adapter"}  # the final step's sealed checkpoint and the adapter
    run_dir = Path(manager.latest_run(job.id).run_dir)
    for row in rows:  # registered: the copies home
        assert Path(row.path).resolve().is_relative_to(run_dir.resolve()) and Path(row.path).exists()


def test_train_on_ray_with_no_storage_ends_non_zero_saying_what_to_set(chat_file, tiny_model, store):
    address = f"http://127.0.0.1:{ray_head.free_port()}"  # never reached: the storage is missing first
    out = nightschool("train", chat_file, "--model", tiny_model, "--max-steps", 2, "--on", "ray",
                      ray_address=address)
    assert out.returncode != 0
    assert "no checkpoint storage for Ray jobs is set" in out.stderr
    assert "nightschool queue remote ray.storage" in out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    (job,) = JobManager(store).jobs()
    assert job.state == "failed"
    again = nightschool("attach", job.id, ray_address=address)  # a job with no run, followed later: the same words
    assert again.returncode != 0 and "nightschool queue remote ray.storage" in again.stderr
    assert "Traceback" not in again.stdout + again.stderr
    shown = nightschool("queue", "remote", ray_address=address)
    assert f"{address} (from $RAY_ADDRESS" in shown.stdout
