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


def test_the_first_run_and_train_make_their_request_the_same_way_without_each_others_parser():
    """The default command's demo never reads attributes only `train`'s parser sets (it crashed on `args.on`)."""
    from app.cli.jobs import TrainRequest, train_request
    from app.cli.main import SAMPLE, build_parser, demo_request
    from app.core.train.spec import Hyper

    default = build_parser().parse_args(["--headless", "--demo-only"])
    assert not hasattr(default, "on") and not hasattr(default, "recipe")
    demo = demo_request(default.max_steps)
    assert (demo.file, demo.model, demo.recipe, demo.on, demo.detach) == (str(SAMPLE), "default", "sft", "local", False)
    assert Hyper(**demo.hyper).max_steps == 20 and Hyper(**demo.hyper).batch_size == 4

    given = build_parser().parse_args(["train", "x.jsonl", "--on", "ray", "--max-steps", "3", "--recipe", "dpo"])
    assert train_request(given) == TrainRequest(file="x.jsonl", recipe="dpo", on="ray", hyper={"max_steps": 3})
