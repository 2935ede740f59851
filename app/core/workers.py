"""Running a worker process (engine.workers.dataset_build, dataset_check, mine_pairs, evaluate, evaluate_gguf, export)
with a spec file in a scratch folder: its envelopes stream back on stdout; its callers read what it made from them."""
from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Iterator, TypeVar

from app.core.base import paths, protocol as P
from app.core.base.store import Store

Body = TypeVar("Body")


class WorkerRun:
    """One worker process: `events()` yields its envelopes as they come; `result(P.Built)` is the last envelope body of
    a kind it sent (what it made); `failure()` says why it made nothing. Its folder lives under `root` (by default
    paths.work_dir()); `close()` removes it."""

    def __init__(self, store: Store, module: str, spec: dict, root: Path | None = None) -> None:
        self.store = store
        self.id = uuid.uuid4().hex[:10]
        self.folder = (root if root is not None else paths.work_dir()) / self.id
        self.folder.mkdir(parents=True)
        spec = {**spec, "job": self.id, "out": str(self.folder / "out"), "db": store.where,
                "models_dir": str(paths.models_dir())}
        self.spec_path = self.folder / "spec.json"
        self.spec_path.write_text(json.dumps(spec, indent=1), encoding="utf-8")
        self.err_path = self.folder / "worker.err"
        self.results: dict[type, object] = {}  # the last body of each kind the worker sent
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
            if isinstance(env.body, P.Error):
                self.error = env.body
            else:
                self.results[type(env.body)] = env.body
            yield env

    def result(self, kind: type[Body]) -> Body | None:
        """The last envelope body of this kind the worker sent (None: it sent none)."""
        found = self.results.get(kind)
        return found if isinstance(found, kind) else None

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

    def drain(self) -> int:
        """Read the rest of its envelopes and wait for it: its exit code."""
        for _ in self.events():
            pass
        return self.proc.wait()

    def close(self) -> None:
        """Remove its folder (nothing half-made stays)."""
        shutil.rmtree(self.folder, ignore_errors=True)

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
