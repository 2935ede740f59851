"""`nightschool queue …`: add with a priority, list, pause/resume (queue and job), reorder, errors that exit 2, and
`queue run` taking a failed job's retry to its end."""
from __future__ import annotations

import re

import pytest

from app.cli.main import main
from tests.conftest import write_jsonl


@pytest.fixture
def cli(capsys):
    def run(*args: str) -> tuple[int, str, str]:
        rc = main(["queue", *args])
        out = capsys.readouterr()
        return rc, out.out, out.err
    return run


def add(cli, data, model, *extra) -> str:
    rc, out, err = cli("add", str(data), "--model", str(model), "--dry-run", *extra)
    assert rc == 0, err
    return re.search(r"queued job (\S+)", out).group(1)


def line_of(listing: str, job_id: str) -> str:
    return next(line for line in listing.splitlines() if job_id in line)


def test_add_list_pause_resume_and_reorder(cli, chat_file, tiny_model):
    rc, out, _ = cli("pause")
    assert rc == 0 and "queue paused" in out
    first = add(cli, chat_file, tiny_model, "--priority", "high")
    second = add(cli, chat_file, tiny_model)
    rc, out, _ = cli("list")
    assert rc == 0 and "PAUSED" in out
    assert line_of(out, first).split()[:5] == ["1", first, "sft", "high", "queued"]
    assert line_of(out, second).split()[:5] == ["2", second, "sft", "normal", "queued"]

    assert cli("move", second, "--top")[0] == 0
    rc, out, _ = cli("list")
    assert line_of(out, second).split()[:4] == ["1", second, "sft", "high"]
    assert cli("priority", second, "low")[0] == 0 and cli("pause", first)[0] == 0
    rc, out, _ = cli("list")
    assert line_of(out, first).split()[4] == "held" and line_of(out, second).split()[:4] == ["2", second, "sft", "low"]
    assert cli("resume", first)[0] == 0 and cli("resume")[0] == 0
    rc, out, _ = cli("list")
    assert "PAUSED" not in out and line_of(out, first).split()[4] == "queued"


def test_refusals_print_error_and_exit_2(cli, chat_file, tiny_model, tmp_path):
    bad = write_jsonl(tmp_path / "alpaca.jsonl", [{"instruction": "a", "input": "", "output": "b"}])
    rc, _, err = cli("add", str(bad))
    assert rc == 2 and err.startswith("error:") and "Alpaca" in err
    rc, _, err = cli("retry", "no-such-job")
    assert rc == 2 and "no job 'no-such-job'" in err
    job = add(cli, chat_file, tiny_model)
    rc, _, err = cli("retry", job)
    assert rc == 2 and "only a failed, stopped or cancelled job can be retried" in err
    rc, _, err = cli("move", job, "--before", "nope")
    assert rc == 2 and "not waiting" in err


def test_run_then_retry_a_failed_job_to_its_end(cli, chat_file, tiny_model, monkeypatch):
    job = add(cli, chat_file, tiny_model, "--priority", "high")
    monkeypatch.setenv("NIGHTSCHOOL_ENGINE_PYTHON", "/nonexistent/python")
    rc, out, _ = cli("run", "--interval", "0.2")
    assert rc == 1 and f"job {job} failed to start" in out
    assert line_of(cli("list")[1], job).split()[4] == "failed"
    monkeypatch.delenv("NIGHTSCHOOL_ENGINE_PYTHON")
    rc, out, _ = cli("retry", job)
    assert rc == 0 and "queued again" in out
    rc, out, _ = cli("run", "--interval", "0.2")
    assert rc == 0 and f"started job {job}" in out and f"job {job} ended: validated" in out
    assert line_of(cli("list")[1], job).split()[:5] == ["-", job, "sft", "high", "validated"]
