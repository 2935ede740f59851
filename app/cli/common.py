"""What the CLI's commands share: the store, a worker's progress as tqdm bars, refusals printed as sentences."""
from __future__ import annotations

import sys

from tqdm import tqdm

from app.core.base import protocol as P


def open_store():
    """The data dir's store (imported late: `nightschool --help` stays fast)."""
    from app.core.base.store import Store

    return Store()


class WorkerProgress:
    """A worker's progress (evaluation, export) as a tqdm bar per phase, and its log lines."""

    def __init__(self) -> None:
        self.bar: tqdm | None = None
        self.phase = ""

    def __call__(self, env: P.Envelope) -> None:
        if env.type == "progress":
            if env.body.phase != self.phase or self.bar is None:
                self.close()
                self.phase = env.body.phase
                self.bar = tqdm(total=env.body.total, desc=env.body.phase, unit="item", file=sys.stderr,
                                dynamic_ncols=True)
            self.bar.n = env.body.step
            self.bar.refresh()
        elif env.type == "log":
            (self.bar.write if self.bar else print)(f"  {env.body.message}", file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def refusals(fn) -> int:
    """fn()'s exit code; a refusal (what, why, what to do) is printed to stderr and exits 2."""
    from app.core.base.errors import Explained

    try:
        return fn()
    except Explained as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
