"""Kill -9 of the client (the `nightschool train` CLI following a job) mid-job: the engine finishes; every event is on disk."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from app.core.train.events import read_events
from tests.engine.helpers import of_type, wait_for_events

REPO = Path(__file__).resolve().parents[2]


def first_run_dir(runs: Path, cli: subprocess.Popen, timeout: float = 120.0) -> Path:
    """The run dir the CLI creates (polled every 50 ms; fails with the CLI's output if it exits first)."""
    deadline = time.monotonic() + timeout
    while not (runs.is_dir() and any(runs.iterdir())):
        assert cli.poll() is None, cli.stdout.read().decode()
        assert time.monotonic() < deadline, "the CLI created no run dir"
        time.sleep(0.05)
    return next(runs.iterdir())


def test_engine_outlives_a_killed_client(manager, chat_file, tiny_model, ns_home):
    cli = subprocess.Popen([sys.executable, "-m", "app.cli.main", "train", str(chat_file), "--model", str(tiny_model),
                            "--max-steps", "150", "--epochs", "1000", "--batch-size", "4", "--grad-accum", "1"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env={**os.environ, "NIGHTSCHOOL_HOME": str(ns_home)})
    try:
        run_dir = first_run_dir(ns_home / "runs", cli)
        wait_for_events(run_dir, lambda ev: len(of_type(ev, "metrics")) >= 5)
    finally:
        cli.send_signal(signal.SIGKILL)
        cli.wait()
    job_id = run_dir.name
    run = manager.latest_run(job_id)
    engine = psutil.Process(run.pid)
    assert engine.is_running() and engine.status() != psutil.STATUS_ZOMBIE, "the engine died with its client"
    engine.wait(timeout=300)

    events = read_events(run_dir / "events.jsonl")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert len(of_type(events, "metrics")) == 150
    assert events[-1].type == "state" and events[-1].body.state == "completed"
    assert of_type(events, "result")
    assert json.loads((run_dir / "result.json").read_text())["job_id"] == job_id

    assert manager.reconcile() == [job_id]  # the next client to open the store records the outcome
    assert manager.job(job_id).state == "completed"
