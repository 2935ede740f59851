"""Ray Jobs backend: submit the engine to an existing Ray cluster with JobSubmissionClient and a runtime_env.

What travels: the staged folder (spec rewritten for the cluster's paths + the scrubbed dataset snapshot) as the
working_dir, and this checkout's `app` and `engine` packages as py_modules (no UI, no caches). The cluster's Python
must have the engine's requirements (torch, transformers, peft, trl — `pip install 'nightschool[remote]'` there):
they are not shipped per job (gigabytes).

Events come back by tailing the job's log (`tail_job_logs`): the wrapper prints each engine event as a line. Why
not the engine's socket through a port: Ray Jobs already exposes the dashboard port for submission, so log tailing
needs nothing else opened, and the log survives the job (finalise reads it whole with `get_job_logs`).

The cluster is the `train.ray.address` setting, else `$RAY_ADDRESS` (the variable Ray's own tools read; passed to
JobSubmissionClient as is, so it takes the forms `ray job submit` takes). Before the first submission to an address one
tiny job asks the cluster's Python which of the engine's modules it lacks (`check_python`): a job that would die of
ModuleNotFoundError three times is refused up front, naming the packages and the command that installs them there. A
passed check is remembered per address (`train.ray.checked`). It runs where Ray runs an entrypoint that asks for no
resources (the head node): on a cluster whose nodes have different Pythons, the training job's node may still differ.

Checkpoints go to a storage both sides reach (settings `train.ray.storage`, as this machine sees it, and
`train.ray.remote_storage`, as the cluster sees it; the same path by default). fsspec URLs (s3://, gs://) are NOT
supported yet: the storage must be a shared path (NFS, a mounted bucket).
"""
from __future__ import annotations

import asyncio
import os
import secrets
import threading
import time
from pathlib import Path

from app.core.base import settings
from app.core.train.backends.base import BackendError
from app.core.train.backends.remote import (ENGINE_MODULES, ENGINE_MODULES_DEFAULT_MODEL, EventMirror, RemoteRecord,
                                            check_entrypoint, python_refusal, send_control, settle, stage)
from app.core.train.spec import DEFAULT_MODEL, JobSpec

ADDRESS = "train.ray.address"  # e.g. http://gpu-box:8265 (the dashboard/job-submission port)
ADDRESS_ENV = "RAY_ADDRESS"  # used when the setting is not set (the setting wins)
CHECKED = "train.ray.checked"  # {address: [modules its Python was seen to have]}: the check runs once per address
CHECK_TIMEOUT_S = 120.0  # the Python check's job must end within this; else the job goes ahead unchecked
CHECK_POLL_S = 0.5
STORAGE = "train.ray.storage"  # the checkpoint storage as this machine sees it
REMOTE_STORAGE = "train.ray.remote_storage"  # ... and as the cluster sees it (default: the same)
NUM_GPUS = "train.ray.num_gpus"  # GPUs the engine asks Ray for (default 0: CPU clusters and the tests)
UNREACHABLE_GRACE = "train.ray.unreachable_grace_s"  # how long the head may be gone before the job fails
TOKEN_ENV = "NIGHTSCHOOL_RAY_TOKEN"
KEYRING_USER = "ray"
RUNNING = ("PENDING", "RUNNING")
STATUS_TTL_S = 0.5
TAIL_DRAIN_S = 5.0  # after Ray says an attempt ended, how long it still counts as running while its log stream drains
EXCLUDES = ["__pycache__", "*.pyc", "ui", "resources"]


def token() -> str | None:
    """A bearer token for a cluster behind an auth proxy: $NIGHTSCHOOL_RAY_TOKEN, else the OS keyring."""
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV]
    try:
        import keyring

        return keyring.get_password("nightschool", KEYRING_USER)
    except Exception:  # noqa: BLE001 - no usable keyring: no token
        return None


def _packages() -> list[str]:
    from app.core.base.paths import CODE_ROOT

    return [str(CODE_ROOT / "app"), str(CODE_ROOT / "engine")]


class RayBackend:
    """Start, follow, command and finish jobs on one Ray cluster."""

    name = "ray"

    def __init__(self, address: str, storage: str, remote_storage: str = "", num_gpus: float = 0,
                 unreachable_grace_s: float = 60.0, store=None) -> None:
        if not address:
            raise BackendError("no Ray cluster is set", why="jobs --on ray need the head's job-submission address",
                               fix=f"nightschool queue remote ray.address http://HEAD:8265 (or {ADDRESS_ENV}="
                                   "http://HEAD:8265 in the environment)")
        if not storage:
            raise BackendError("no checkpoint storage for Ray jobs is set",
                               why="checkpoints must land where both this machine and the cluster reach them",
                               fix="nightschool queue remote ray.storage /shared/path")
        self.address, self.storage = address, storage
        self.remote_storage = remote_storage or storage
        self.num_gpus, self.grace = num_gpus, unreachable_grace_s
        self.store = store  # where a passed Python check is remembered (None: checked before every first attempt)
        self._client = None
        self._mirrors: dict[str, EventMirror] = {}
        self._tails: dict[str, threading.Thread] = {}
        self._unreachable_since: dict[str, float] = {}
        self._ended_at: dict[str, float] = {}  # job id -> when Ray first said its attempt ended (log draining)
        self.last_error: dict[str, str] = {}
        self._alive_cache: dict[str, tuple[float, bool, str]] = {}  # run dir -> (when, alive, Ray status)

    @classmethod
    def from_settings(cls, store) -> RayBackend:
        g = lambda k, d=None: settings.get(store, k, d)
        return cls(g(ADDRESS, "") or os.environ.get(ADDRESS_ENV, ""), g(STORAGE, ""), g(REMOTE_STORAGE, ""),
                   float(g(NUM_GPUS, 0) or 0), float(g(UNREACHABLE_GRACE, 60.0)), store=store)

    def client(self):
        if self._client is None:
            try:
                from ray.job_submission import JobSubmissionClient
            except ImportError as exc:
                raise BackendError("Ray is not installed here", why=str(exc),
                                   fix="pip install 'nightschool[remote]' (or 'ray[default]')") from exc
            tok = token()
            self._client = JobSubmissionClient(self.address,
                                               headers={"Authorization": f"Bearer {tok}"} if tok else None)
        return self._client

    # --- the cluster's Python ----------------------------------------------------------------
    def _checked(self) -> dict:
        return dict(settings.get(self.store, CHECKED, {}) or {}) if self.store is not None else {}

    def check_python(self, modules=ENGINE_MODULES, timeout: float = CHECK_TIMEOUT_S) -> bool:
        """Run one tiny job on the cluster that reports which of `modules` its Python cannot import; raise a
        BackendError naming them and the command that installs them there. True once checked (and remembered for
        this address); False when the check did not end within `timeout` (a busy head): nothing is known then, the
        job goes ahead as it would have without the check, and the check runs again before the next submission."""
        modules = list(dict.fromkeys(modules))
        client, sid = self.client(), f"nightschool-pycheck-{secrets.token_hex(4)}"
        try:
            client.submit_job(entrypoint=check_entrypoint(modules), submission_id=sid,
                              metadata={"nightschool_check": "python"})
            deadline = time.monotonic() + timeout
            while not client.get_job_status(sid).is_terminal():
                if time.monotonic() > deadline:
                    _quietly(client.stop_job, sid)
                    return False
                time.sleep(CHECK_POLL_S)
            log = client.get_job_logs(sid)
        except Exception as exc:
            raise OSError(f"the Ray cluster at {self.address} did not run the Python check: {exc}") from exc
        _quietly(client.delete_job, sid)  # the cluster's job list keeps the user's jobs, not our checks
        if (refusal := python_refusal(f"the Ray cluster at {self.address}", log)) is not None:
            raise refusal
        if self.store is not None:
            checked = self._checked()
            checked[self.address] = sorted(set(checked.get(self.address, [])) | set(modules))
            settings.put(self.store, CHECKED, checked)
        return True

    def _check_before_first_submission(self, spec: JobSpec) -> None:
        needed = [*ENGINE_MODULES, *(ENGINE_MODULES_DEFAULT_MODEL if spec.model == DEFAULT_MODEL else ())]
        if not set(needed) <= set(self._checked().get(self.address, [])):
            self.check_python(needed)

    # --- start -------------------------------------------------------------------------------
    def start(self, spec: JobSpec, run_dir: Path) -> RemoteRecord:
        """Stage what travels and submit one attempt; a later attempt (crash resume, retry) reuses the remote run dir,
        where the engine finds its last sealed checkpoint by itself. Before the first submission to this address the
        cluster's Python is checked (check_python)."""
        self._check_before_first_submission(spec)
        rec = RemoteRecord.load(run_dir)
        remote_run_dir = f"{self.remote_storage.rstrip('/')}/{spec.job_id}"
        folder, sha = stage(spec, run_dir, remote_run_dir, f"{self.remote_storage.rstrip('/')}/models")
        if rec is None:
            rec = RemoteRecord(backend=self.name, address=self.address, remote_run_dir=remote_run_dir,
                               home_run_dir=str(Path(self.storage) / spec.job_id), remote_spec_sha256=sha)
        rec.remote_spec_sha256 = sha
        rec.attempts += 1
        rec.submission_id = f"nightschool-{spec.job_id}-{rec.attempts}"
        try:
            self.client().submit_job(
                entrypoint="python -m engine.train.remote_entry --spec spec.json",
                submission_id=rec.submission_id,
                runtime_env={"working_dir": str(folder), "py_modules": _packages(), "excludes": EXCLUDES,
                             "env_vars": {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE":
                                          os.environ.get("HF_HUB_OFFLINE", "0")}},
                entrypoint_num_gpus=self.num_gpus or None, entrypoint_num_cpus=1,
                metadata={"nightschool_job": spec.job_id})
        except BackendError:
            raise
        except Exception as exc:
            raise OSError(f"the Ray cluster at {self.address} did not take the job: {exc}") from exc
        rec.save(run_dir)
        self._alive_cache.pop(str(run_dir), None)  # the previous attempt's answer is not this one's
        self._ended_at.pop(spec.job_id, None)
        self._follow(spec.job_id, run_dir, rec)
        return rec

    def _mirror(self, job_id: str, run_dir: Path, rec: RemoteRecord) -> EventMirror:
        if job_id not in self._mirrors:
            self._mirrors[job_id] = EventMirror(run_dir, rec.remote_run_dir)
        return self._mirrors[job_id]

    def _follow(self, job_id: str, run_dir: Path, rec: RemoteRecord) -> None:
        """A daemon thread streams the attempt's log into events.jsonl (the live charts tail that file)."""
        mirror, sid, client = self._mirror(job_id, run_dir, rec), rec.submission_id, self.client()

        async def tail() -> None:
            async for chunk in client.tail_job_logs(sid):
                mirror.feed(chunk)

        def run() -> None:
            try:
                asyncio.run(tail())
            except Exception as exc:  # noqa: BLE001 - the head went away; finalise reads the log again
                self.last_error[job_id] = f"log stream ended: {exc}"

        thread = threading.Thread(target=run, name=f"ray-tail-{job_id}", daemon=True)
        self._tails[job_id] = thread
        thread.start()

    # --- follow ------------------------------------------------------------------------------
    def status(self, run_dir: Path) -> str:
        """The Ray job status of the latest attempt (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED), or UNREACHABLE."""
        rec = RemoteRecord.load(run_dir)
        try:
            status = str(self.client().get_job_status(rec.submission_id).value)
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001 - head gone, network down
            job_id = Path(run_dir).name
            self._unreachable_since.setdefault(job_id, time.monotonic())
            self.last_error[job_id] = (f"the Ray head at {self.address} cannot be reached ({type(exc).__name__}: "
                                       f"{str(exc)[:200]})")
            self._client = None  # a fresh client next time (the head may come back on the same address)
            return "UNREACHABLE"
        self._unreachable_since.pop(Path(run_dir).name, None)
        return status

    def alive(self, run_dir: Path) -> bool:
        """Running on the cluster, or unreachable for less than the grace period (the head may come back). Asked at
        most every STATUS_TTL_S per job (a follower polls alive() often; each answer is an HTTP round trip)."""
        key = str(run_dir)
        cached = self._alive_cache.get(key)
        if cached and time.monotonic() - cached[0] < STATUS_TTL_S:
            return cached[1]
        status = self.status(run_dir)
        if status == "UNREACHABLE":
            answer = time.monotonic() - self._unreachable_since[Path(run_dir).name] < self.grace
        else:
            answer = status in RUNNING or self._draining(Path(run_dir).name)
        self._alive_cache[key] = (time.monotonic(), answer, status)
        return answer

    def _draining(self, job_id: str) -> bool:
        """The attempt ended, but this process's log stream is still bringing its last events home (the result, the
        final state): a follower that stopped now would miss them. At most TAIL_DRAIN_S."""
        tail = self._tails.get(job_id)
        if tail is None or not tail.is_alive():
            return False
        return time.monotonic() - self._ended_at.setdefault(job_id, time.monotonic()) < TAIL_DRAIN_S

    def waiting(self, run_dir: Path) -> str | None:
        """What the job waits for while the cluster has it but it does not run (a sentence), else None."""
        if not self.alive(run_dir):
            return None
        status = self._alive_cache[str(run_dir)][2]
        if status == "PENDING":
            return (f"waiting for the Ray cluster at {self.address} to start the job (Ray: PENDING — its runtime "
                    "environment is being set up, or no node has the CPU/GPU it asks for free yet)")
        if status == "UNREACHABLE":
            return (f"the Ray head at {self.address} cannot be reached; waiting up to {self.grace:.0f} s for it to "
                    "come back")
        return None

    # --- finish ------------------------------------------------------------------------------
    def finish(self, job_id: str, run_dir: Path, job_spec_sha: str) -> tuple[int | None, str | None]:
        """After the attempt ended: read its whole log into events.jsonl and engine.err, bring the checkpoints, the
        adapter and the result home. Returns (exit code, why it could not be followed — None when it could)."""
        rec = RemoteRecord.load(run_dir)
        mirror = self._mirror(job_id, run_dir, rec)
        reason = None
        try:
            logs = self.client().get_job_logs(rec.submission_id)
        except Exception as exc:  # noqa: BLE001 - head gone: what reached us so far stays; the storage still holds
            logs = ""
            reason = self.last_error.get(job_id) or f"the Ray head at {self.address} cannot be reached: {exc}"
        mirror.feed(logs)
        reason = settle(rec, Path(run_dir), job_spec_sha, logs, f"ray job {rec.submission_id}", reason)
        self._mirrors.pop(job_id, None)
        return mirror.exit_code, reason

    # --- commands ----------------------------------------------------------------------------
    def command(self, run_dir: Path, command: str) -> None:
        send_control(RemoteRecord.load(run_dir), command)

    def cancel(self, run_dir: Path) -> None:
        rec = RemoteRecord.load(run_dir)
        try:
            self.client().stop_job(rec.submission_id)
        except Exception as exc:
            raise BackendError(f"the Ray job {rec.submission_id} could not be stopped", why=str(exc),
                               fix=f"ray job stop {rec.submission_id} --address {self.address}") from exc


def _quietly(call, *args) -> None:
    try:
        call(*args)
    except Exception:  # noqa: BLE001 - tidying up the check's own job: nothing depends on it
        pass
