"""The `nightschool` command: refused files exit 2 with the reason; listing an empty store says what to do."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import write_jsonl

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NIGHTSCHOOL_HOME": str(home)}
    env.pop("DISPLAY", None)
    return subprocess.run([sys.executable, "-m", "app.cli.main", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def test_train_refuses_a_wrong_file_with_the_reason(tmp_path, ns_home):
    bad = write_jsonl(tmp_path / "alpaca.jsonl", [{"instruction": "a", "input": "", "output": "b"}])
    out = run_cli("train", str(bad), home=ns_home)
    assert out.returncode == 2 and "Alpaca" in out.stderr


def test_jobs_on_an_empty_store(ns_home):
    out = run_cli("jobs", home=ns_home)
    assert out.returncode == 0 and "nightschool train" in out.stdout


def test_attach_to_an_unknown_job(ns_home):
    out = run_cli("attach", "nope", home=ns_home)
    assert out.returncode == 2 and "no job 'nope'" in out.stderr
