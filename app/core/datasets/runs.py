"""The dataset workers (build, check, mine pairs) as processes: what a build or a mining run made is checked against
its manifest and registered (fail-closed); a check's report comes back as it is."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.core.base import protocol as P
from app.core.base.store import Store
from app.core.datasets.catalog import RegistrationError, Registry, datasets_dir
from app.core.workers import WorkerRun


@dataclass
class Outcome:
    ok: bool
    name: str = ""
    identical_to: str | None = None
    examples: int = 0
    fingerprint: str = ""
    message: str = ""  # what happened (on failure: what, why, what to do)


class DatasetRun(WorkerRun):
    """A dataset worker: it works beside the datasets (its folder moves into the catalog on registering);
    `finish()` registers what it built, `finish_report()` returns a check's report."""

    def __init__(self, store: Store, module: str, spec: dict) -> None:
        super().__init__(store, module, spec, datasets_dir() / ".work")

    def finish(self) -> Outcome:
        """Drain, wait, then register the folder; the work folder goes either way (nothing half-built stays)."""
        code = self.drain()
        try:
            return self._outcome(code)
        finally:
            self.close()

    def finish_report(self) -> tuple[P.Report | None, str]:
        """For a validation worker: (its report, '') or (None, why it failed)."""
        code = self.drain()
        try:
            report = self.result(P.Report)
            return (report, "") if report is not None else (None, self.failure(code))
        finally:
            self.close()

    def _outcome(self, code: int) -> Outcome:
        built = self.result(P.Built)
        if built is None:
            return Outcome(False, message=self.failure(code))
        try:
            reg = Registry(self.store).register(Path(built.path), built.manifest_sha256)
        except RegistrationError as exc:
            return Outcome(False, message=str(exc))
        return Outcome(True, reg.dataset.name, reg.identical_to, reg.dataset.examples, reg.dataset.fingerprint,
                       f"identical to {reg.identical_to}: nothing new was stored" if reg.identical_to else "built")


def start_build(store: Store, config) -> DatasetRun:
    return DatasetRun(store, "engine.workers.dataset_build", {"config": config.model_dump()})


def start_check(store: Store, target: Path, base_model: str | None = None, max_length: int = 0,
                heldout: frozenset[str] = frozenset()) -> DatasetRun:
    """Validate a built dataset folder or a file; with a base model also the DEEP (tokenizer) checks."""
    return DatasetRun(store, "engine.workers.dataset_check", {"target": str(target), "base_model": base_model,
                                                              "max_length": max_length, "heldout": sorted(heldout)})


def start_pairs(store: Store, config) -> DatasetRun:
    """Preference pairs (app.core.datasets.pairs.PairsConfig): the student's answers against the teacher's."""
    return DatasetRun(store, "engine.workers.mine_pairs", {"config": config.model_dump()})
