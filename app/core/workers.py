"""Running a worker (engine.workers.dataset_build, engine.workers.mine_pairs, engine.workers.evaluate) as a subprocess: its envelopes stream back on
stdout for progress; when it ends its folder is checked against the manifest and registered (fail-closed)."""
from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from app.core.base import paths, protocol as P
from app.core.base.store import Store
from app.core.datasets.catalog import RegistrationError, Registry, datasets_dir



@dataclass
class Outcome:
    ok: bool
    name: str = ""
    identical_to: str | None = None
    examples: int = 0
    fingerprint: str = ""
    message: str = ""  # what happened (on failure: what, why, what to do)


class WorkerRun:
    """One worker process: `events()` yields its envelopes as they come; `finish()` registers what it built."""

    def __init__(self, store: Store, module: str, spec: dict) -> None:
        self.store = store
        self.id = uuid.uuid4().hex[:10]
        self.folder = datasets_dir() / ".work" / self.id
        self.folder.mkdir(parents=True)
        spec = {**spec, "job": self.id, "out": str(self.folder / "out"), "db": str(store.path),
                "models_dir": str(paths.models_dir())}
        self.spec_path = self.folder / "spec.json"
        self.spec_path.write_text(json.dumps(spec, indent=1), encoding="utf-8")
        self.err_path = self.folder / "worker.err"
        self.built: P.Built | None = None
        self.report: P.Report | None = None
        self.evaluated: P.Evaluated | None = None
        self.exported: P.Exported | None = None
        self.error: P.Error | None = None
        with self.err_path.open("wb") as err:
            self.proc = subprocess.Popen([paths.engine_python(), "-m", module, "--spec", str(self.spec_path)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                         cwd=paths.engine_cwd(), env=paths.child_env(), text=True, encoding="utf-8")

    def events(self) -> Iterator[P.Envelope]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                env = P.loads(line)
            except Exception:  # noqa: BLE001 - stray output (a library printing) is not an event
                continue
            if isinstance(env.body, P.Built):
                self.built = env.body
            elif isinstance(env.body, P.Report):
                self.report = env.body
            elif isinstance(env.body, P.Evaluated):
                self.evaluated = env.body
            elif isinstance(env.body, P.Exported):
                self.exported = env.body
            elif isinstance(env.body, P.Error):
                self.error = env.body
            yield env

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()

    def stream(self, sink=None, cancel=None) -> int | None:
        """Pass every envelope to `sink` until the worker exits; its exit code, or None
        when `cancel` (a threading.Event) was set (the worker is then stopped and waited for)."""
        for env in self.events():
            if cancel is not None and cancel.is_set():
                self.cancel()
                self.proc.wait()
                return None
            if sink is not None:
                sink(env)
        return self.proc.wait()

    def finish(self) -> Outcome:
        """Drain, wait, then register the folder; the work folder goes either way (nothing half-built stays)."""
        for _ in self.events():
            pass
        code = self.proc.wait()
        try:
            return self._outcome(code)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def finish_report(self) -> tuple[P.Report | None, str]:
        """For a validation worker: (its report, '') or (None, why it failed)."""
        for _ in self.events():
            pass
        code = self.proc.wait()
        try:
            return (self.report, "") if self.report is not None else (None, self.failure(code))
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _outcome(self, code: int) -> Outcome:
        if self.built is None:
            return Outcome(False, message=self.failure(code))
        try:
            reg = Registry(self.store).register(Path(self.built.path), self.built.manifest_sha256)
        except RegistrationError as exc:
            return Outcome(False, message=str(exc))
        return Outcome(True, reg.dataset.name, reg.identical_to, reg.dataset.examples, reg.dataset.fingerprint,
                       f"identical to {reg.identical_to}: nothing new was stored" if reg.identical_to else "built")

    def failure(self, code: int) -> str:
        """Why the worker produced nothing: its error envelope (what, why, fix), else its exit code and stderr."""
        if self.error is not None:
            e = self.error
            return " ".join(_sentence(x) for x in (e.message, e.why, e.fix) if x)
        tail = self.err_path.read_text(encoding="utf-8", errors="replace")[-1500:] if self.err_path.exists() else ""
        return f"the worker ended (exit {code}) without a result. {tail.strip()}".strip()


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def start_build(store: Store, config) -> WorkerRun:
    return WorkerRun(store, "engine.workers.dataset_build", {"config": config.model_dump()})


def start_check(store: Store, target: Path, base_model: str | None = None, max_length: int = 0,
                heldout: frozenset[str] = frozenset()) -> WorkerRun:
    """Validate a built dataset folder or a file; with a base model also the DEEP (tokenizer) checks."""
    return WorkerRun(store, "engine.workers.dataset_check", {"target": str(target), "base_model": base_model,
                                                     "max_length": max_length, "heldout": sorted(heldout)})


def start_pairs(store: Store, config) -> WorkerRun:
    """Preference pairs (app.core.datasets.pairs.PairsConfig): the student's answers against the teacher's."""
    return WorkerRun(store, "engine.workers.mine_pairs", {"config": config.model_dump()})
