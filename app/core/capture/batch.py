"""A scan's batches as ingest_many plans them: the files sent to prepare workers (and when), the bytes a session's
files hold."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from app.core.capture import agents
from app.core.capture.prepare import file_size


@dataclass
class Sent:
    """A planned file sent to a prepare worker, and when (a row of its files stored since makes it stale)."""

    future: Future
    plan: tuple[Path, str, bool]
    sent_at: datetime


@dataclass
class Batch:
    """ingest_many's files of one transaction, planned: each with its plan, a worker's Sent, or its answer."""

    jobs: list[tuple[int, Path, Any]]
    end: int  # the index of the next batch's first file
    size: int = 0  # bytes it reads

    def cancel(self) -> None:
        for _, _, item in self.jobs:
            if isinstance(item, Sent):
                item.future.cancel()


def reads(main: Path, agent: str) -> int:
    """The bytes a session's files hold: its file and its agent's `companions` (a Claude Code session's sub-agent
    files; what a batch counts towards BATCH_BYTES before any is read)."""
    found = agents.named(agent)
    return file_size(main) + (agents.load(found.companions)(main) if found is not None and found.companions else 0)
