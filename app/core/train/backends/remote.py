"""What every remote backend shares at home: the remote spec and its staging folder, mirroring the engine's events
from its log into the run's events.jsonl, bringing sealed checkpoints and the result home, and control files."""
from __future__ import annotations

import json
import shutil
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from app.core.base import protocol as P
from app.core.train import checkpoints as ckpt
from app.core.train.spec import JobSpec

EVENT_PREFIX = "NSEV "  # the remote wrapper prints each engine event line after this
EXIT_PREFIX = "NSEXIT "  # ... and the engine's exit code after this
RECORD_FILE = "remote.json"  # in the local run dir: where the job runs remotely (no secrets)
STAGE_DIR = "remote-stage"  # in the local run dir: exactly what travels (spec + scrubbed snapshot)
CONTROL_DIR = "control"  # in the remote run dir: commands for the wrapper to forward to the engine


@dataclass
class RemoteRecord:
    """A remote job's placement: backend, where, the cluster's id of the latest attempt, its run dir both ways."""
    backend: str
    address: str
    remote_run_dir: str  # the run dir as the cluster sees it
    home_run_dir: str  # the same folder as this machine sees it (a shared path); "" when not reachable from here
    remote_spec_sha256: str
    submission_id: str = ""
    attempts: int = 0

    def save(self, run_dir: Path) -> None:
        (Path(run_dir) / RECORD_FILE).write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")

    @classmethod
    def load(cls, run_dir: str | Path) -> RemoteRecord | None:
        path = Path(run_dir) / RECORD_FILE
        return cls(**json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else None


def stage(spec: JobSpec, run_dir: Path, remote_run_dir: str, remote_models_dir: str) -> tuple[Path, str]:
    """Write what travels into run_dir/remote-stage: the spec rewritten for the cluster's paths and the scrubbed
    dataset snapshot (and eval snapshot). Never the raw transcripts: only the snapshot the job trains on."""
    folder = Path(run_dir) / STAGE_DIR
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    remote = spec.model_copy(update={
        "run_dir": remote_run_dir, "dataset_path": f"{remote_run_dir}/dataset.jsonl",
        "eval_path": f"{remote_run_dir}/eval.jsonl" if spec.eval_path else None,
        "socket_path": f"/tmp/ns-{spec.job_id}.sock", "models_dir": remote_models_dir})
    shutil.copy2(spec.dataset_path, folder / "dataset.jsonl")
    if spec.eval_path:
        shutil.copy2(spec.eval_path, folder / "eval.jsonl")
    return folder, remote.write(folder / "spec.json")


class EventMirror:
    """Appends the engine events found in a remote job's log to the local events.jsonl: each seq once, in order,
    with the remote run dir's paths rewritten to the local run dir (so checkpoint events name the copies home)."""

    def __init__(self, run_dir: Path, remote_run_dir: str) -> None:
        self.path = Path(run_dir) / "events.jsonl"
        self.local, self.remote = str(run_dir), remote_run_dir
        self.lock = threading.Lock()
        self.last_seq = 0
        if self.path.is_file():
            for line in self.path.read_bytes().splitlines():
                try:
                    self.last_seq = max(self.last_seq, P.loads(line).seq or 0)
                except P.ProtocolError:
                    continue
        self.exit_code: int | None = None

    def feed(self, text: str) -> int:
        """Take a chunk of log text; returns how many new events were appended."""
        added = []
        for line in text.splitlines():
            if line.startswith(EXIT_PREFIX):
                self.exit_code = int(line[len(EXIT_PREFIX):].strip() or 1)
            if not line.startswith(EVENT_PREFIX):
                continue
            raw = line[len(EVENT_PREFIX):].replace(self.remote, self.local)
            try:
                env = P.loads(raw)
            except P.ProtocolError:
                continue
            with self.lock:
                if env.seq is None or env.seq <= self.last_seq:
                    continue
                self.last_seq = env.seq
                added.append(raw)
        if added:
            with self.lock, self.path.open("a", encoding="utf-8") as fh:
                fh.write("".join(a + "\n" for a in added))
        return len(added)


def other_lines(text: str) -> str:
    """The log without the event lines: what the engine and the wrapper wrote to stderr/stdout."""
    return "\n".join(x for x in text.splitlines() if not x.startswith((EVENT_PREFIX, EXIT_PREFIX)))


def bring_home(rec: RemoteRecord, run_dir: Path, job_spec_sha: str) -> list[str]:
    """Copy the remote run dir's sealed checkpoints, adapter and result into the local run dir; returns notes on
    what could not come home. The result's spec fingerprint is checked against the remote spec sent and then
    restated as the job's own spec's (the remote spec differs only in paths), so validate() judges it as today."""
    notes: list[str] = []
    if not rec.home_run_dir or not Path(rec.home_run_dir).is_dir():
        return [f"the remote run dir {rec.home_run_dir or rec.remote_run_dir} is not reachable from here"]
    src, dst = Path(rec.home_run_dir), Path(run_dir)
    (dst / "checkpoints").mkdir(exist_ok=True)
    for folder in sorted((src / "checkpoints").glob("checkpoint-*")):
        if ckpt.verify(folder) is None:
            notes.append(f"{folder.name} is torn on the storage and stays there")
            continue
        target = dst / "checkpoints" / folder.name
        if target.exists() and ckpt.verify(target) is not None:
            continue
        tmp = target.with_name(target.name + ".incoming")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(folder, tmp)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    for name in ("plan.json",):
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)
    result = src / "result.json"
    if result.is_file():
        data = json.loads(result.read_text(encoding="utf-8"))
        adapter = data.get("adapter_path") or ""
        if adapter.startswith(rec.remote_run_dir):
            rel = Path(adapter).relative_to(rec.remote_run_dir)
            shutil.rmtree(dst / rel, ignore_errors=True)
            shutil.copytree(src / rel, dst / rel)
            data["adapter_path"] = str(dst / rel)
        if data.get("spec_sha256") == rec.remote_spec_sha256:
            data["spec_sha256"] = job_spec_sha
        text = json.dumps(data).replace(rec.remote_run_dir, str(dst))
        (dst / "result.json").write_text(text, encoding="utf-8")
    return notes


def settle(rec: RemoteRecord, run_dir: Path, job_spec_sha: str, log: str, label: str,
           reason: str | None) -> str | None:
    """An attempt ended: the log's other lines go to engine.err under `label`, what it made comes home; the reason the
    attempt could not be read (if any) with the notes on what could not come home."""
    if rest := other_lines(log):
        with (Path(run_dir) / "engine.err").open("a", encoding="utf-8") as fh:
            fh.write(f"--- {label} ---\n{rest}\n")
    notes = bring_home(rec, Path(run_dir), job_spec_sha)
    return f"{reason}; {'; '.join(notes)}" if reason and notes else reason


def send_control(rec: RemoteRecord, command: str) -> None:
    """Leave a command for the remote wrapper (it forwards it to the engine's socket within a second)."""
    from app.core.train.backends import BackendError

    if command not in P.COMMANDS:
        raise ValueError(f"unknown command {command!r}")
    if not rec.home_run_dir or not Path(rec.home_run_dir).is_dir():
        raise BackendError(f"cannot send {command} to the remote job", why=f"its run dir {rec.remote_run_dir} is "
                           "not reachable from this machine", fix="use a checkpoint storage both sides mount")
    folder = Path(rec.home_run_dir) / CONTROL_DIR
    folder.mkdir(exist_ok=True)
    tmp = folder / f".{time.time_ns()}-{command}"
    tmp.write_text(command, encoding="utf-8")
    tmp.rename(folder / f"{time.time_ns()}-{command}.cmd")
