"""The capture service: watchdog on every configured root, a worker that ingests changed files, a periodic sweep.

Events only say "look at this file"; the byte offsets in the store decide what is new, so a missed, repeated or
reordered event never loses or duplicates a line. The sweep catches roots that appear later and finishes files
that stopped growing with a last line and no newline.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from app.core.capture.ingest import IDLE_FINAL_S, IngestResult, Ingestor
from app.core.capture.sources import CaptureConfig, session_files

SWEEP_S = 30.0
DEBOUNCE_S = 0.05  # events for the same file within this window are one ingest
Progress = Callable[[int, int, Path], None]


@dataclass
class SourceStatus:
    agent: str
    root: str
    state: str  # watching | not found | stopped | error
    last_event: float | None = None  # epoch seconds of the last ingest that stored something
    error: str = ""


class _Handler(FileSystemEventHandler):
    def __init__(self, service: CaptureService) -> None:
        self.service = service

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type not in ("created", "modified", "moved", "closed"):
            return
        target = getattr(event, "dest_path", "") or event.src_path
        self.service.notify(Path(target if isinstance(target, str) else target.decode()))


class CaptureService:
    """Start it once; it ingests on its own thread and reports each ingest that stored something."""

    def __init__(self, ingestor: Ingestor, config: CaptureConfig | None = None,
                 on_ingest: Callable[[IngestResult], None] | None = None, sweep_s: float = SWEEP_S) -> None:
        self.ingestor, self.config = ingestor, config or ingestor.config
        self.on_ingest, self.sweep_s = on_ingest, sweep_s
        self._queue: queue.Queue[Path | None] = queue.Queue()
        self._observer: Observer | None = None
        self._watched: dict[str, object] = {}
        self._status: dict[str, SourceStatus] = {}
        self._seen: dict[Path, tuple[int, float, bool]] = {}  # path -> (size, mtime, finished) at the last look
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._looking = threading.Lock()  # the worker and the sweep never look at files at the same time
        self.swept = threading.Event()  # set after each full sweep (the first one runs at start)

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._observer = Observer()
        self._observer.start()
        self._schedule_roots()
        for target, name in ((self._work, "capture-ingest"), (self._sweep_loop, "capture-sweep")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
        for thread in self._threads:
            thread.join(timeout=10)
        for status in self._status.values():
            status.state = "stopped"

    def notify(self, path: Path) -> None:
        """A file may have changed: queue it if it is a session file under a root."""
        if self.config.agent_for(path):
            self._queue.put(path)

    # --- one-shot ------------------------------------------------------------------------------
    def scan(self, progress: Progress | None = None, origin: str = "scan") -> list[IngestResult]:
        """Ingest every session file under the roots that changed since the last look (on every core)."""
        paths = [path for _, path in session_files(self.config)]
        with self._looking:
            results = self.ingestor.ingest_many(paths, origin=origin, progress=progress)
        for result in filter(None, results):
            self._record(result.agent, result)
        return [r for r in results if r is not None]

    def status(self) -> list[SourceStatus]:
        self._schedule_roots()
        return [self._status[root] for root in self._status]

    # --- threads -------------------------------------------------------------------------------
    def _work(self) -> None:
        while not self._stop.is_set():
            first = self._queue.get()
            if first is None:
                return
            batch = {first: None}
            deadline = time.monotonic() + DEBOUNCE_S
            while (left := deadline - time.monotonic()) > 0:
                try:
                    item = self._queue.get(timeout=left)
                except queue.Empty:
                    break
                if item is None:
                    return
                batch[item] = None
            for path in batch:
                with self._looking:
                    self._look(path, self.config.agent_for(path), "watch", events=True)

    def _sweep_loop(self) -> None:
        """A first sweep at start (what changed while nothing watched), then one every sweep_s."""
        while not self._stop.is_set():
            self._schedule_roots()
            for agent, path in session_files(self.config):
                if self._stop.is_set():
                    return
                self._sweep_one(path, agent)
            self.swept.set()
            self._stop.wait(self.sweep_s)

    def _sweep_one(self, path: Path, agent: str) -> None:
        with self._looking:
            self._look(path, agent, "watch")

    def _look(self, path: Path, agent: str | None, origin: str, events: bool = False) -> IngestResult | None:
        """Ingest a file unless it is exactly as it was at the last look (and already finished when idle)."""
        try:
            stat = path.stat()
        except OSError:
            return None
        idle = time.time() - stat.st_mtime > IDLE_FINAL_S
        if not events and self._seen.get(path) == (stat.st_size, stat.st_mtime, idle):
            return None
        try:
            result = self.ingestor.ingest(path, origin=origin, agent=agent)
        except Exception as exc:  # noqa: BLE001 - the watcher must survive any one bad file
            self._error(agent, f"{path.name}: {exc.__class__.__name__}: {exc}")
            return None
        self._seen[path] = (stat.st_size, stat.st_mtime, idle)
        if result is not None:
            self._record(agent, result)
        return result

    def _record(self, agent: str | None, result: IngestResult) -> None:
        for status in self._status.values():
            if status.agent == agent:
                status.last_event = time.time()
                status.error = result.message if result.status == "error" else status.error
        if self.on_ingest:
            self.on_ingest(result)

    def _error(self, agent: str | None, message: str) -> None:
        for status in self._status.values():
            if status.agent == agent:
                status.error = message

    def _schedule_roots(self) -> None:
        for agent, roots in self.config.roots.items():
            for root in roots:
                status = self._status.setdefault(root, SourceStatus(agent, root, "not found"))
                if root in self._watched or not Path(root).is_dir():
                    continue
                if self._observer is None:
                    status.state = "stopped" if Path(root).is_dir() else "not found"
                    continue
                try:
                    self._watched[root] = self._observer.schedule(_Handler(self), root, recursive=True)
                    status.state = "watching"
                except OSError as exc:
                    status.state, status.error = "error", f"cannot watch {root}: {exc}"
