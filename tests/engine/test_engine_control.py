"""Engine control over the real socket: pause/resume/stop/checkpoint_now, a wrong token, crashes with a clear error."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

from app.core.base import protocol as P
from app.core.train.engine_client import EngineClient
from tests.conftest import fast_hyper
from tests.engine.helpers import attempts, of_type, send_command, states, wait_for_events


def _running(events) -> bool:
    return len(of_type(events, "metrics")) >= 3


def _this_attempt_running(events) -> bool:
    runs = attempts(events)
    return _running(runs[-1]) if runs else False


def test_pause_resume_checkpoint_and_stop(manager, chat_file, tiny_model):
    job = manager.submit(chat_file, model=str(tiny_model), hyper=fast_hyper(max_steps=5000, save_steps=10**6))
    run = manager.latest_run(job.id)
    alive = lambda: manager.is_alive(run)  # noqa: E731
    wait_for_events(run.run_dir, _running, alive=alive)

    send_command(manager, job.id, "pause")
    events = wait_for_events(run.run_dir, lambda ev: "paused" in states(ev), alive=alive)
    paused_seq = [e.seq for e in of_type(events, "state") if e.body.state == "paused"][0]
    from app.cli.main import main as cli

    assert cli(["checkpoint", job.id]) == 0  # the CLI's command path; queued while paused: taken at the next step
    send_command(manager, job.id, "resume")
    events = wait_for_events(run.run_dir, lambda ev: states(ev)[-1] == "running" and of_type(ev, "checkpoint"),
                             alive=alive)
    resumed_seq = [e.seq for e in of_type(events, "state") if e.seq > paused_seq][0]
    between = [e for e in events if paused_seq < e.seq < resumed_seq]
    assert not of_type(between, "metrics"), "training went on while paused"
    assert of_type(events, "checkpoint")[0].body.reason == "requested"

    send_command(manager, job.id, "stop")
    job = manager.wait(job.id, timeout=120)
    assert job.state == "stopped", job.error
    events = wait_for_events(run.run_dir, lambda ev: True)
    stop_ckpt = [c for c in of_type(events, "checkpoint") if c.body.reason == "stop"]
    assert stop_ckpt and Path(stop_ckpt[0].body.path).is_dir()
    result = json.loads((Path(run.run_dir) / "result.json").read_text())
    assert result["status"] == "stopped" and 0 < result["metrics"]["steps"] < 5000
    assert {c.kind for c in manager.checkpoints(job.id)} == {"checkpoint", "adapter"}


def test_wrong_token_is_refused_and_the_job_goes_on(manager, chat_file, tiny_model):
    job = manager.submit(chat_file, model=str(tiny_model), hyper=fast_hyper(max_steps=40))
    run = manager.latest_run(job.id)
    wait_for_events(run.run_dir, lambda ev: "loading" in states(ev))
    assert oct(os.stat(run.socket_path).st_mode & 0o777) == "0o600"

    async def intrude():
        bad = EngineClient(run.socket_path, "not-the-token", job.id)
        with pytest.raises(P.AuthError, match="wrong token"):
            await bad.connect()

    asyncio.run(intrude())
    assert manager.wait(job.id, timeout=300).state == "completed"


def test_a_folder_that_is_not_loadable_fails_with_the_reason(manager, chat_file, tmp_path):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    (broken / "model.safetensors").write_bytes(b"not really weights")
    (broken / "tokenizer.json").write_text("{}")
    job = manager.submit(chat_file, model=str(broken), hyper=fast_hyper())
    job = manager.wait(job.id, timeout=300)
    assert job.state == "failed"
    assert "could not be loaded" in job.error or "cannot be used" in job.error
    assert "engine stderr" in job.error  # the tail of the engine's stderr comes with it


def test_an_engine_that_keeps_dying_without_progress_is_given_up_with_its_stderr(manager, chat_file, tiny_model):
    job = manager.submit(chat_file, model=str(tiny_model), hyper=fast_hyper(max_steps=5000, save_steps=4000))
    for attempt in range(3):  # killed before its first checkpoint each time: resumed twice, then given up
        run = manager.latest_run(job.id)
        wait_for_events(run.run_dir, _this_attempt_running, alive=lambda r=run: manager.is_alive(r))
        os.kill(run.pid, signal.SIGKILL)
        job = manager.wait(job.id, timeout=60) if attempt == 2 else job
        if attempt < 2:
            while manager.is_alive(run):
                time.sleep(0.02)
            assert manager.reconcile() == [job.id] and manager.job(job.id).state == "running"
    assert job.state == "failed" and "died 3 times" in job.error and "exited without a result" in job.error
    assert [r.state for r in manager.runs(job.id)] == ["crashed", "crashed", "failed"]
    assert manager.checkpoints(job.id) == []


def test_a_hub_id_without_network_fails_with_what_to_do(manager, chat_file, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as on this machine: no hub at run time
    job = manager.submit(chat_file, model="HuggingFaceTB/no-such-model-here", hyper=fast_hyper())
    job = manager.wait(job.id, timeout=300)
    assert job.state == "failed"
    assert "hub" in job.error and "embedded default or a local model folder" in job.error
