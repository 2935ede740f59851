"""What a remote backend is (the `Backend` protocol) and its refusal (`BackendError`), imported by every backend."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from app.core.base.errors import Explained

if TYPE_CHECKING:
    from app.core.base.store import Store
    from app.core.train.spec import JobSpec


class BackendError(Explained, ValueError):
    """A backend cannot be used as asked: what, why, what to do."""


@runtime_checkable
class Backend(Protocol):
    """A place a job's engine runs other than here: `train/jobs.JobManager` starts, follows and finishes a job through
    it, `queue/scheduler.Queue` relays commands and cancels. One object per job (it may hold the log stream).

    Optional: `waiting(run_dir) -> str | None`, what the job waits for while the cluster has it but it does not run
    (the follower says it; Ray has it)."""

    name: str  # the registry's name of it (`backends.BACKENDS`), recorded in the run's remote.json

    @classmethod
    def from_settings(cls, store: Store) -> Backend:
        """The backend as the settings (`nightschool queue remote`) describe it; a BackendError names what is unset."""
        ...

    def start(self, spec: JobSpec, run_dir: Path) -> object:
        """Stage what travels and submit one attempt (a crash resume reuses the remote run dir); returns the job's
        placement (`remote.RemoteRecord`, saved in the run dir)."""
        ...

    def alive(self, run_dir: Path) -> bool:
        """Whether the latest attempt still runs (or its cluster is briefly out of reach)."""
        ...

    def status(self, run_dir: Path) -> str:
        """The cluster's word for the latest attempt, or UNREACHABLE."""
        ...

    def finish(self, job_id: str, run_dir: Path, job_spec_sha: str) -> tuple[int | None, str | None]:
        """After the attempt ended: its events, checkpoints and result home; (exit code, why it could not be read)."""
        ...

    def command(self, run_dir: Path, command: str) -> None:
        """Relay pause / resume / stop / checkpoint_now to the remote engine."""
        ...

    def cancel(self, run_dir: Path) -> None:
        """End the remote job through its cluster."""
        ...
