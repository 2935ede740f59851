"""SkyPilot backend: the real sky.Task this job would launch, validated by SkyPilot's own API (no cloud reached), and
the status/log/cancel mapping against recorded SkyPilot responses (RecordedSky below is a stand-in: no SkyPilot API
server or cloud exists here)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

sky = pytest.importorskip("sky", reason="SkyPilot is not installed (pip install skypilot==0.10.3; it pins click<8.2, "
                                        "which conflicts with huggingface-hub here, so CI does not install it)")

from app.core.train.backends.remote import RemoteRecord
from app.core.train.backends.skypilot import MOUNT, PIN, SkyPilotBackend, build_task, task_config
from app.core.train.spec import JobSpec


def test_the_pinned_skypilot_is_the_one_installed():
    from importlib.metadata import version

    assert version("skypilot") == PIN


def _spec(tmp_path: Path) -> JobSpec:
    data = tmp_path / "dataset.jsonl"
    data.write_text('{"messages": []}\n', encoding="utf-8")
    return JobSpec(job_id="20260101-000000-abcd", dataset_path=str(data), dataset_sha256="0" * 64,
                   models_dir=str(tmp_path / "models"), run_dir=str(tmp_path), socket_path=str(tmp_path / "s.sock"),
                   token="t")


def test_the_task_is_skypilots_own_and_valid(tmp_path):
    from app.core.train.backends.remote import stage

    spec = _spec(tmp_path)
    folder, _ = stage(spec, tmp_path, f"{MOUNT}/{spec.job_id}", f"{MOUNT}/models")
    task = build_task(task_config(spec.job_id, folder, "s3://ns-checkpoints", use_spot=True))
    assert isinstance(task, sky.Task)
    yaml = task.to_yaml_config()
    assert yaml["file_mounts"][MOUNT] == {"source": "s3://ns-checkpoints", "persistent": True, "mode": "MOUNT_CACHED"}
    assert yaml["run"].endswith("python -m engine.train.remote_entry --spec spec.json")
    assert "torch" in yaml["setup"] and yaml["resources"]["use_spot"] is True
    assert sorted(p.name for p in folder.iterdir()) == ["dataset.jsonl", "spec.json"]  # what travels
    remote = json.loads((folder / "spec.json").read_text())
    assert remote["run_dir"] == f"{MOUNT}/{spec.job_id}" and remote["dataset_path"].startswith(MOUNT)
    bad = task_config(spec.job_id, folder, "s3://ns-checkpoints")
    bad["file_mounts"][MOUNT]["mode"] = "MOUNT_EVENTUALLY"
    with pytest.raises(Exception, match="MOUNT_EVENTUALLY|mode"):
        build_task(bad)  # SkyPilot's own schema refuses it: the validation is real


class RecordedSky:
    """Stand-in for the `sky` module: returns SkyPilot 0.10.3 responses recorded in the shapes its SDK documents
    (sky.jobs.queue records, launch's (job_id, handle), tail_logs' exit code) and records the calls made."""

    def __init__(self, queue_records: list[dict], log: str = "", log_code: int = 0) -> None:
        self.calls: list[tuple] = []
        self._results: dict[str, object] = {}
        self.jobs = self
        self.queue_records, self.log, self.log_code = queue_records, log, log_code

    def _request(self, name: str, result) -> str:
        rid = f"req-{len(self._results)}"
        self._results[rid] = result
        return rid

    def get(self, rid: str):
        result = self._results.pop(rid)
        if isinstance(result, Exception):
            raise result
        return result

    def launch(self, task, name=None):
        self.calls.append(("launch", task.name, name))
        return self._request("launch", (7, None))

    def queue(self, refresh, skip_finished=False, all_users=False, job_ids=None):
        self.calls.append(("queue", refresh, job_ids))
        return self._request("queue", self.queue_records)

    def cancel(self, name=None, job_ids=None, all=False, all_users=False, pool=None):
        self.calls.append(("cancel", job_ids))
        return self._request("cancel", None)

    def tail_logs(self, name=None, job_id=None, follow=True, controller=False, refresh=False, tail=None,
                  output_stream=None):
        self.calls.append(("tail_logs", job_id, follow))
        output_stream.write(self.log)
        return self.log_code


def _record(status: str) -> dict:
    from sky.jobs.state import ManagedJobStatus

    return {"job_id": 7, "job_name": "nightschool-20260101-000000-abcd", "resources": "1x[L4:1]",
            "submitted_at": 1.7e9, "end_at": None, "job_duration": 12.0, "recovery_count": 1,
            "status": ManagedJobStatus(status), "cluster_resources": "1x(gpus=L4:1)", "region": "us-east-1",
            "task_id": 0, "task_name": "nightschool-20260101-000000-abcd"}


@pytest.mark.parametrize("status,alive", [("PENDING", True), ("STARTING", True), ("RUNNING", True),
                                          ("RECOVERING", True), ("SUCCEEDED", False), ("FAILED", False),
                                          ("FAILED_SETUP", False), ("CANCELLED", False)])
def test_status_maps_to_alive(tmp_path, status, alive):
    rec = RemoteRecord(backend="skypilot", address="aws", remote_run_dir=f"{MOUNT}/j", home_run_dir="",
                       remote_spec_sha256="x", submission_id="7")
    rec.save(tmp_path)
    fake = RecordedSky([_record(status)])
    backend = SkyPilotBackend("s3://b", sky=fake)
    assert backend.status(tmp_path) == status and backend.alive(tmp_path) is alive
    assert fake.calls == [("queue", False, [7])] * 2  # status() and alive() each ask once


def test_launch_log_and_cancel_map_to_skypilots_calls(tmp_path):
    spec = _spec(tmp_path)
    event = {"v": 1, "id": "e1", "job": spec.job_id, "seq": 1, "ts": 0.0, "type": "checkpoint",
             "body": {"step": 4, "path": f"{MOUNT}/{spec.job_id}/checkpoints/checkpoint-4", "reason": "scheduled"}}
    log = f"setup done\nNSEV {json.dumps(event)}\nNSEXIT 0\n"
    fake = RecordedSky([_record("SUCCEEDED")], log=log)
    backend = SkyPilotBackend("s3://b", sky=fake)
    rec = backend.start(spec, tmp_path)
    assert rec.submission_id == "7" and fake.calls[0] == ("launch", f"nightschool-{spec.job_id}",
                                                          f"nightschool-{spec.job_id}")
    code, reason = backend.finish(spec.job_id, tmp_path, "sha")
    assert code == 0 and "not reachable" not in (reason or "")
    mirrored = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert mirrored[0]["body"]["path"] == f"{tmp_path}/checkpoints/checkpoint-4"  # the remote path, rewritten home
    assert "setup done" in (tmp_path / "engine.err").read_text()
    backend.cancel(tmp_path)
    assert fake.calls[-1] == ("cancel", [7])
