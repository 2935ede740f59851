"""Datasets controller: lists built datasets, builds off the GUI thread, reads reports and preview lines lazily."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.core.base import protocol
from app.core.base.schema import BuiltDataset
from app.core.base.store import Store
from app.core.capture.queries import CaptureQueries
from app.core.datasets import manifest
from app.core.datasets.catalog import Registry
from app.core.datasets.config import BuildConfig
from app.core.datasets.splits import SPLITS
from app.core.datasets.runs import DatasetRun, Outcome, start_build
from app.ui.background import StorePoll

CHUNK = 1024**2  # newline scans read this much at a time
MAX_LINE = 32 * 1024**2  # one JSONL record larger than this is not read for the preview
MAX_REPORT = 64 * 1024**2  # a report.json larger than this is not loaded
STORED = "SELECT (SELECT max(id) FROM built_datasets), (SELECT max(id) FROM imports)"  # datasets, sessions


class DatasetsController(QObject):
    """Model side of the Datasets panel: it emits, the view subscribes; no widgets here."""

    changed = Signal()  # the list of datasets changed
    building = Signal(bool)
    progress = Signal(str, int, int, object)  # phase, step, total, ETA seconds | None
    log = Signal(str)  # what the worker is doing before its first progress
    finished = Signal(object)  # Outcome
    verified = Signal(str, object)  # dataset name, list of integrity problems ([] = intact)
    message = Signal(str, str)  # level (info | error), text
    _event = Signal(object)  # Progress | Log, emitted from the build thread
    _done = Signal(object)  # Outcome, emitted from the build thread
    _checked = Signal(str, object)  # emitted from a verify thread

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store, self.registry = store, Registry(store)
        self.run: DatasetRun | None = None
        self.thread: threading.Thread | None = None
        self.cancelled = False
        self._event.connect(self._on_event)
        self._done.connect(self._on_done)
        self._checked.connect(self._on_checked)
        self._stored = StorePoll(self, store, STORED)  # a CLI build or import, the daemon's cycle: shown in a second
        self._stored.changed.connect(self.changed)

    # --- reading ---------------------------------------------------------------------------------
    def datasets(self) -> list[BuiltDataset]:
        return self.registry.all()

    def sessions_stored(self) -> tuple[int, int]:
        """(tasks, sub-agent sessions) captured: the Capture tab counts tasks; a build takes sub-agents too."""
        return CaptureQueries(self.store).sessions_stored()

    def details(self, row: BuiltDataset) -> Details:
        return read_details(row.name, Path(row.path))

    def verify(self, name: str, folder: str | Path) -> None:
        """Hash the dataset's files against its manifest on a thread; `verified(name, problems)` follows."""
        def check() -> None:
            try:
                problems = manifest.verify(Path(folder))
            except OSError as exc:
                problems = [f"the folder cannot be read: {exc}"]
            try:
                self._checked.emit(name, problems)
            except RuntimeError:  # the window closed meanwhile: nobody is waiting for the answer
                pass
        threading.Thread(target=check, name="dataset-verify", daemon=True).start()

    # --- building --------------------------------------------------------------------------------
    @property
    def is_building(self) -> bool:
        return self.run is not None

    def build(self, config: BuildConfig) -> bool:
        """Start the worker and follow it on a thread; False (with a message) when it cannot start."""
        if self.run is not None:
            self.message.emit("error", "A build is already running: wait for it or cancel it.")
            return False
        if config.name and self.registry.get(config.name):
            self.message.emit("error", f"A dataset named {config.name!r} already exists: choose another name.")
            return False
        try:
            run = start_build(self.store, config)
        except Exception as exc:  # noqa: BLE001 - shown to the user, the app goes on
            self.message.emit("error", f"The build could not start: {type(exc).__name__}: {exc}")
            return False
        self.run, self.cancelled = run, False
        self.thread = threading.Thread(target=self._follow, args=(run,), name="dataset-build", daemon=True)
        self.thread.start()
        self.building.emit(True)
        return True

    def cancel(self) -> None:
        if self.run is not None:
            self.cancelled = True
            self.run.cancel()

    def stop(self) -> None:
        """Window closing: a running build is cancelled (nothing half-built is registered)."""
        self._stored.close()
        self.cancel()
        if self.thread is not None:
            self.thread.join(timeout=10)

    def _follow(self, run: DatasetRun) -> None:
        try:
            for env in run.events():
                if isinstance(env.body, (protocol.Progress, protocol.Log)):
                    self._event.emit(env.body)
            outcome = run.finish()
        except Exception as exc:  # noqa: BLE001 - reported as a failed build
            outcome = Outcome(False, message=f"following the build failed: {type(exc).__name__}: {exc}")
        try:
            self._done.emit(outcome)
        except RuntimeError:  # the window closed meanwhile: the outcome has nobody to go to
            pass

    def _on_checked(self, name: str, problems: list[str]) -> None:
        self.verified.emit(name, problems)

    def _on_event(self, body: protocol.Progress | protocol.Log) -> None:
        if isinstance(body, protocol.Progress):
            self.progress.emit(body.phase, body.step, body.total, body.eta_s)
        else:
            self.log.emit(body.message)

    def _on_done(self, outcome: Outcome) -> None:
        cancelled, self.run, self.thread = self.cancelled and not outcome.ok, None, None
        if outcome.ok:
            self.changed.emit()
        self.building.emit(False)
        self.finished.emit(outcome)
        self.message.emit(*describe(outcome, cancelled))


def describe(outcome: Outcome, cancelled: bool = False) -> tuple[str, str]:
    """(level, text) for a finished build."""
    if cancelled:
        return "info", "Build cancelled: nothing was stored."
    if not outcome.ok:
        text = outcome.message or "the worker gave no reason"
        return "error", f"Build failed: {text[0].upper()}{text[1:]}"
    if outcome.identical_to:
        return "info", f"Identical to {outcome.identical_to}: nothing new was stored."
    return "info", f"Built {outcome.name}: {outcome.examples:,} examples."


# --- a dataset's files ---------------------------------------------------------------------------------
@dataclass
class Details:
    """What the report shows: the manifest, report.json, and why either could not be read."""

    name: str
    folder: Path
    manifest: manifest.Manifest | None = None
    report: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def sizes(self) -> dict[str, int]:
        splits = self.manifest.splits if self.manifest else {}
        return {s: splits[s].examples if s in splits else 0 for s in SPLITS}


def read_details(name: str, folder: Path) -> Details:
    out = Details(name, folder)
    try:
        out.manifest = manifest.read(folder)
    except (OSError, ValueError) as exc:
        out.problems.append(f"{manifest.MANIFEST} cannot be read: {exc}")
    path = folder / manifest.REPORT
    try:
        if path.stat().st_size > MAX_REPORT:
            out.problems.append(f"{manifest.REPORT} is larger than {MAX_REPORT // 1024**2} MiB: not loaded")
        else:
            out.report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        out.problems.append(f"{manifest.REPORT} cannot be read: {exc}")
    return out


class JsonlLines:
    """Records of a JSONL file by line number: newline offsets are found lazily, only as far as asked."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.starts = [0]  # byte offset of each line found so far
        self.scanned = 0
        self.done = False

    def _scan(self, lines: int) -> None:
        with self.path.open("rb") as fh:
            fh.seek(self.scanned)
            while len(self.starts) <= lines and not self.done:
                chunk = fh.read(CHUNK)
                if not chunk:
                    self.done = True
                    break
                at = chunk.find(b"\n")
                while at != -1:
                    self.starts.append(self.scanned + at + 1)
                    at = chunk.find(b"\n", at + 1)
                self.scanned += len(chunk)

    def get(self, n: int) -> dict | None:
        """The n-th record (0-based), None past the end; raises OSError / ValueError for an unreadable one."""
        if n < 0:
            return None
        if len(self.starts) <= n + 1 and not self.done:
            self._scan(n + 1)
        if n >= len(self.starts):
            return None
        with self.path.open("rb") as fh:
            fh.seek(self.starts[n])
            line = fh.readline(MAX_LINE)
        if len(line) >= MAX_LINE:
            raise ValueError(f"line {n + 1} of {self.path.name} is larger than {MAX_LINE // 1024**2} MiB")
        return json.loads(line) if line.strip() else None


@dataclass
class Example:
    """One example of the preview: its rendering in segments and, from its split file, token counts."""

    id: str = ""
    segments: list = field(default_factory=list)
    tokens: int | None = None
    trained: int | None = None
    session_id: str = ""
    window: int = 0
    source: str = ""
    problem: str = ""


class Preview:
    """preview.jsonl holds the splits in order (train, val, test); the k-th example of a split is one line of it,
    and the same line of the split's file gives its token counts."""

    def __init__(self, folder: Path, sizes: dict[str, int]) -> None:
        self.sizes = sizes
        self.lines = JsonlLines(folder / manifest.PREVIEW)
        self.records = {s: JsonlLines(folder / manifest.SPLIT_FILES[s]) for s in SPLITS}
        self.first, at = {}, 0
        for s in SPLITS:
            self.first[s], at = at, at + sizes.get(s, 0)

    def example(self, split: str, index: int) -> Example:
        try:
            line = self.lines.get(self.first[split] + index)
            record = self.records[split].get(index)
        except (OSError, ValueError) as exc:
            return Example(problem=f"cannot read the example: {exc}")
        if not line:
            return Example(problem=f"{manifest.PREVIEW} has no line for {split} example {index + 1}")
        out = Example(line.get("id", ""), line.get("segments") or [])
        if line.get("split") != split:
            out.problem = f"{manifest.PREVIEW} is out of order: this line belongs to {line.get('split')!r}"
        if record and record.get("id") == out.id:
            out.tokens, out.trained = record.get("tokens"), record.get("trained")
            out.session_id, out.window, out.source = record.get("session_id", ""), record.get("window", 0), \
                record.get("source", "")
        return out
