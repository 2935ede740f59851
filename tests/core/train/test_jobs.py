"""Job manager edges that need no training: refused inputs create nothing; an engine that cannot start fails the job."""
from __future__ import annotations

import pytest

from app.core.datafiles.chatfile import DatasetError
from app.core.train.modelref import ModelRefError
from tests.conftest import write_jsonl


def test_refused_file_creates_no_job_and_no_run_dir(manager, tmp_path, ns_home):
    bad = write_jsonl(tmp_path / "sharegpt.jsonl", [{"conversations": [{"from": "human", "value": "hi"}]}])
    with pytest.raises(DatasetError, match="ShareGPT"):
        manager.submit(bad)
    assert manager.jobs() == [] and not any((ns_home / "runs").glob("*"))


def test_a_folder_that_is_not_a_model_is_refused_before_anything_starts(manager, chat_file, tmp_path):
    with pytest.raises(ModelRefError, match="no config.json"):
        manager.submit(chat_file, model=str(tmp_path))
    assert manager.jobs() == []


def test_engine_that_cannot_start_fails_the_job_with_what_to_do(manager, chat_file, monkeypatch):
    monkeypatch.setenv("NIGHTSCHOOL_ENGINE_PYTHON", "/nonexistent/python")
    job = manager.submit(chat_file)
    assert job.state == "failed"
    assert "could not be started" in job.error and "NIGHTSCHOOL_ENGINE_PYTHON" in job.error
    assert job.records == 24 and manager.reconcile() == []


def test_a_job_with_no_run_yet_is_followed_until_its_launch_is_refused(manager, store, chat_file, monkeypatch):
    """No run to follow (queued --on ray) is no crash: the follower says what the job waits for; the launch refused
    (no cluster named) ends the follow, and the job's error says what to set."""
    import asyncio

    from app.core.queue.scheduler import Queue

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    job = manager.submit(chat_file, start=False, backend="ray")
    assert manager.latest_run(job.id) is None
    said: list[str] = []

    async def follow_then_launch() -> None:
        task = asyncio.ensure_future(manager.follower(job.id, lambda env: said.append(env.body.message)).run())
        while not said:  # the follower's first poll
            await asyncio.sleep(0.01)
        assert not task.done()  # a queued job is waited for, not given up on
        Queue(store, manager, inbox=False).tick(scan_inbox=False)  # the launch: refused, no cluster is named
        await asyncio.wait_for(task, 10)

    asyncio.run(follow_then_launch())
    assert said == [f"job {job.id} is queued on ray: it starts once no other job holds the queue, while the app, "
                    "the daemon or `nightschool queue run` is running"]
    done = manager.finalise(job.id)
    assert done.state == "failed" and "no Ray cluster is set" in done.error and "ray.address" in done.error
