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
