"""SkyPilot managed-jobs backend: the sky.Task that runs the engine on a cloud, Kubernetes, Slurm or an SSH node pool.

Pinned to skypilot==0.10.3 (its API moves). The task: `workdir` is the staged folder (spec rewritten for the remote
paths + the scrubbed dataset snapshot); `file_mounts` carry this checkout's `app` and `engine` packages and mount the
checkpoint bucket MOUNT_CACHED at /ns-store, so a spot preemption's recovery finds the last sealed checkpoint there;
`setup` installs the engine's requirements; `run` is the same wrapper + `python -m engine --spec spec.json`.

Status comes from sky.jobs.queue, the log (and with it the events) from sky.jobs.tail_logs, cancel is
sky.jobs.cancel. What is NOT built or run for real: no job has been launched on any cloud or node pool from here
(the tests validate the task with SkyPilot's own API and map recorded responses); checkpoints come home only where
the bucket is also mounted on this machine (`train.skypilot.storage_home`), fsspec download is not built.
SkyPilot pins click<8.2 while this venv's huggingface-hub needs click>=8.4.2: it is not in the `remote` extra.
"""
from __future__ import annotations

import io
from pathlib import Path

from app.core.base import settings
from app.core.train.backends.base import BackendError
from app.core.train.backends.remote import EventMirror, RemoteRecord, send_control, settle, stage
from app.core.train.spec import JobSpec

PIN = "0.10.3"
BUCKET = "train.skypilot.bucket"  # e.g. s3://my-ns-checkpoints, gs://…, or a bucket name
STORAGE_HOME = "train.skypilot.storage_home"  # where that bucket is mounted on this machine ("" = not mounted)
ACCELERATORS = "train.skypilot.accelerators"  # e.g. "L4:1"; "" = SkyPilot's default resources
INFRA = "train.skypilot.infra"  # e.g. "aws", "k8s", "ssh/my-pool"; "" = any enabled
USE_SPOT = "train.skypilot.use_spot"
MOUNT = "/ns-store"
CODE = "~/ns-code"
ALIVE = ("PENDING", "SUBMITTED", "STARTING", "RUNNING", "RECOVERING", "CANCELLING")
ENGINE_REQUIREMENTS = ("torch>=2.6", "transformers>=5.0,<6", "peft>=0.17", "trl>=1.16,<2", "accelerate>=1.10",
                       "datasets>=4", "safetensors>=0.4", "pydantic>=2.7", "psutil>=5.9", "orjson>=3.10",
                       "jinja2>=3.1", "sqlalchemy>=2.0,<2.2", "platformdirs>=4")


def _sky():
    try:
        import sky
    except ImportError as exc:
        raise BackendError("SkyPilot is not installed here", why=str(exc),
                           fix=f"pip install skypilot=={PIN} (in its own environment if click conflicts)") from exc
    return sky


def _packages() -> dict[str, str]:
    from app.core.base.paths import CODE_ROOT

    return {f"{CODE}/app": str(CODE_ROOT / "app"), f"{CODE}/engine": str(CODE_ROOT / "engine")}


def task_config(job_id: str, stage_dir: Path, bucket: str, accelerators: str = "", infra: str = "",
                use_spot: bool = False) -> dict:
    """The task as SkyPilot YAML (a dict): what `sky jobs launch` of this job would run."""
    resources: dict = {"use_spot": bool(use_spot)}
    if accelerators:
        resources["accelerators"] = accelerators
    if infra:
        resources["infra"] = infra
    store = {"mode": "MOUNT_CACHED"}
    store.update({"source": bucket} if "://" in bucket else {"name": bucket})
    return {
        "name": f"nightschool-{job_id}",
        "workdir": str(stage_dir),
        "resources": resources,
        "file_mounts": {MOUNT: store, **_packages()},
        "setup": "python -m pip install --upgrade pip && python -m pip install "
                 + " ".join(f"'{r}'" for r in ENGINE_REQUIREMENTS),
        "run": f"PYTHONPATH={CODE} TOKENIZERS_PARALLELISM=false "
               "python -m engine.train.remote_entry --spec spec.json",
    }


def build_task(config: dict):
    """SkyPilot's own Task from the YAML config, validated by SkyPilot (schema, name, run, workdir, file mounts,
    resources); reaches no cloud."""
    task = _sky().Task.from_yaml_config(config)
    task.validate()
    return task


class _Feed(io.TextIOBase):
    """An output stream for sky.jobs.tail_logs that feeds the event mirror and keeps the other lines."""

    def __init__(self, mirror: EventMirror) -> None:
        self.mirror, self.text = mirror, []

    def write(self, s: str) -> int:
        self.mirror.feed(s)
        self.text.append(s)
        return len(s)


class SkyPilotBackend:
    """Launch, follow, command and finish jobs as SkyPilot managed jobs. `sky` is the SkyPilot module (a recorded
    stand-in in the tests)."""

    name = "skypilot"

    def __init__(self, bucket: str, storage_home: str = "", accelerators: str = "", infra: str = "",
                 use_spot: bool = False, sky=None) -> None:
        if not bucket:
            raise BackendError("no checkpoint bucket for SkyPilot jobs is set",
                               why="a managed job's checkpoints must survive its machine (spot recovery)",
                               fix="nightschool queue remote skypilot.bucket s3://your-bucket")
        self.bucket, self.storage_home = bucket, storage_home
        self.accelerators, self.infra, self.use_spot = accelerators, infra, use_spot
        self._sky = sky

    @property
    def sky(self):
        if self._sky is None:
            self._sky = _sky()
        return self._sky

    @classmethod
    def from_settings(cls, store) -> SkyPilotBackend:
        g = lambda k, d="": settings.get(store, k, d)
        return cls(g(BUCKET), g(STORAGE_HOME), g(ACCELERATORS), g(INFRA), bool(g(USE_SPOT, False)))

    def start(self, spec: JobSpec, run_dir: Path) -> RemoteRecord:
        rec = RemoteRecord.load(run_dir)
        remote_run_dir = f"{MOUNT}/{spec.job_id}"
        folder, sha = stage(spec, run_dir, remote_run_dir, f"{MOUNT}/models")
        if rec is None:
            home = str(Path(self.storage_home) / spec.job_id) if self.storage_home else ""
            rec = RemoteRecord(backend=self.name, address=self.infra or "skypilot", remote_run_dir=remote_run_dir,
                               home_run_dir=home, remote_spec_sha256=sha)
        rec.remote_spec_sha256, rec.attempts = sha, rec.attempts + 1
        task = build_task(task_config(spec.job_id, folder, self.bucket, self.accelerators, self.infra,
                                      self.use_spot))
        try:
            job_id, _ = self.sky.get(self.sky.jobs.launch(task, name=f"nightschool-{spec.job_id}"))
        except Exception as exc:
            raise OSError(f"SkyPilot did not take the job: {exc}") from exc
        rec.submission_id = str(job_id)
        rec.save(run_dir)
        return rec

    def status(self, run_dir: Path) -> str:
        """The managed job's status (PENDING … RECOVERING, SUCCEEDED, FAILED*, CANCELLED), or UNREACHABLE."""
        rec = RemoteRecord.load(run_dir)
        try:
            records = self.sky.get(self.sky.jobs.queue(refresh=False, job_ids=[int(rec.submission_id)]))
        except Exception:  # noqa: BLE001 - the API server or the jobs controller is down
            return "UNREACHABLE"
        for r in records:
            if str(r["job_id"]) == rec.submission_id:
                status = r["status"]
                return str(getattr(status, "value", status))
        return "UNKNOWN"

    def alive(self, run_dir: Path) -> bool:
        """Still running, recovering from a preemption, or the controller briefly out of reach."""
        return self.status(run_dir) in (*ALIVE, "UNREACHABLE")

    def finish(self, job_id: str, run_dir: Path, job_spec_sha: str) -> tuple[int | None, str | None]:
        rec = RemoteRecord.load(run_dir)
        feed = _Feed(EventMirror(run_dir, rec.remote_run_dir))
        reason = None
        try:
            code = self.sky.jobs.tail_logs(job_id=int(rec.submission_id), follow=False, output_stream=feed)
        except Exception as exc:  # noqa: BLE001
            code, reason = None, f"SkyPilot's log of managed job {rec.submission_id} could not be read: {exc}"
        reason = settle(rec, Path(run_dir), job_spec_sha, "".join(feed.text),
                        f"skypilot managed job {rec.submission_id}", reason)
        return (feed.mirror.exit_code if feed.mirror.exit_code is not None else code), reason

    def command(self, run_dir: Path, command: str) -> None:
        send_control(RemoteRecord.load(run_dir), command)

    def cancel(self, run_dir: Path) -> None:
        rec = RemoteRecord.load(run_dir)
        try:
            self.sky.get(self.sky.jobs.cancel(job_ids=[int(rec.submission_id)]))
        except Exception as exc:
            raise BackendError(f"SkyPilot managed job {rec.submission_id} could not be cancelled", why=str(exc),
                               fix=f"sky jobs cancel {rec.submission_id}") from exc
