"""One registry of execution backends: a backend planted in `backends.BACKENDS` is a `--on` choice, with its words."""
from __future__ import annotations

from pathlib import Path

import pytest

from app.core.train import backends
from app.core.train.backends.base import Backend, BackendError


class StandInBackend:
    """A stand-in backend for these tests: it answers the protocol and runs nothing."""

    name = "standin"

    @classmethod
    def from_settings(cls, store) -> StandInBackend:
        return cls()

    def start(self, spec, run_dir: Path) -> object:
        return None

    def alive(self, run_dir: Path) -> bool:
        return False

    def status(self, run_dir: Path) -> str:
        return "SUCCEEDED"

    def finish(self, job_id: str, run_dir: Path, job_spec_sha: str) -> tuple[int | None, str | None]:
        return 0, None

    def command(self, run_dir: Path, command: str) -> None:
        pass

    def cancel(self, run_dir: Path) -> None:
        pass


@pytest.fixture
def planted(monkeypatch):
    monkeypatch.setitem(backends.BACKENDS, "standin", (f"{__name__}:StandInBackend", "a stand-in that runs nothing"))
    monkeypatch.setenv("COLUMNS", "200")  # argparse wraps help at the terminal's width


def _help(argv: list[str], capsys) -> str:
    from app.cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return capsys.readouterr().out


def test_a_planted_backend_is_a_choice_of_train_and_queue_add_with_its_words(planted, capsys):
    from app.cli.main import build_parser

    for argv in (["train"], ["queue", "add"]):
        text = _help(argv, capsys)
        assert "{local,ray,skypilot,standin}" in text
        assert "skypilot (a SkyPilot managed job) or standin (a stand-in that runs nothing)" in text
    assert "backend local|ray|skypilot|standin" in _help(["queue"], capsys)
    assert build_parser().parse_args(["train", "x.jsonl", "--on", "standin"]).on == "standin"


def test_a_planted_backend_is_named_checked_and_found_for_its_run_dir(planted, tmp_path):
    assert backends.check_name("standin") == "standin"
    backends.record_choice(tmp_path, "standin")
    assert backends.choice_of(tmp_path) == "standin"
    assert isinstance(backends.remote_for(tmp_path, store=None), StandInBackend)
    with pytest.raises(BackendError, match="--on local, --on ray, --on skypilot or --on standin"):
        backends.check_name("mars")


def test_without_the_plant_the_registry_is_local_ray_skypilot_and_local_has_no_object(tmp_path):
    assert backends.names() == ("local", "ray", "skypilot")
    assert backends.backend_class("local") is None and backends.remote_for(tmp_path, store=None) is None
    with pytest.raises(BackendError, match="--on local, --on ray or --on skypilot"):
        backends.check_name("standin")


def test_every_registered_backend_and_the_stand_in_answer_the_protocol():
    from app.core.train.backends.ray import RayBackend
    from app.core.train.backends.skypilot import SkyPilotBackend

    assert backends.backend_class("ray") is RayBackend and backends.backend_class("skypilot") is SkyPilotBackend
    made = [RayBackend("http://head:8265", "/shared"), SkyPilotBackend("s3://bucket", sky=object()), StandInBackend()]
    assert all(isinstance(b, Backend) for b in made)
    assert [b.name for b in made] == ["ray", "skypilot", "standin"]


def test_the_policy_accepts_default_and_the_registered_backends():
    from app.core.runtime.school import policy

    assert policy.accepted("train_on") == " | ".join(("default", *backends.BACKENDS))
