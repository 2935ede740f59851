"""Capture controller: owns the watcher service (or shows the runtime's, or says the daemon captures), imports drops
off the GUI thread, coalesces refreshes, and notices what other processes store (a CLI import, the daemon)."""
from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.base.store import Store
from app.core.capture.ingest import Ingestor
from app.core.capture.queries import CaptureQueries
from app.core.capture.sources import CaptureConfig
from app.core.capture.watcher import CaptureService, SourceStatus
from app.core.datafiles.formats import shape_name, transcript_kind
from app.core.importer import ImportReport, import_paths
from app.ui.background import StorePoll

REFRESH_MS = 250  # at most four refreshes a second, however fast the watcher ingests
STORED = "SELECT max(id) FROM imports"  # what the tab shows changed: every ingest, import, refusal, merge adds one
SNIFF_BYTES = 1024**2  # the drop router reads no more than this of a file on the GUI thread


class CaptureController(QObject):
    """Model side of the Capture panel: it emits `changed` (coalesced) and `message`; the view re-queries."""

    changed = Signal()
    message = Signal(str, str)  # level (info | error), text
    _ingested = Signal()  # emitted from the watcher's thread, delivered on the GUI thread
    _imported = Signal(object, int)  # ImportReport | Exception, files dropped

    def __init__(self, store: Store, config: CaptureConfig, watch: bool = True,
                 config_path: Path | None = None, service: CaptureService | None = None,
                 elsewhere: str = "") -> None:
        """service: the runtime's running CaptureService (the runtime starts and stops it; its ingests arrive as
        `capture` events through `on_runtime_event`). elsewhere: another process captures (e.g. "in the daemon
        (pid 123)"): this window runs no watcher and says so."""
        super().__init__()
        self.config, self.config_path = config, config_path
        self.owns_service = service is None
        self.elsewhere = elsewhere
        self.watch = watch and config.watch and self.owns_service and not elsewhere
        self.queries = CaptureQueries(store)
        self.ingestor = service.ingestor if service is not None else Ingestor(store, config)
        self.service = service or CaptureService(self.ingestor, config,
                                                 on_ingest=lambda _result: self._ingested.emit())
        self.running = service is not None
        self.config_problem: str | None = None  # set when the saved settings are damaged: nothing is saved then
        self.imports: list[threading.Thread] = []
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.changed.emit)
        self._ingested.connect(self.refresh_soon)
        self._imported.connect(self._on_imported)
        self._stored = StorePoll(self, store, STORED)  # whoever stored it (the CLI, the daemon): shown in a second
        self._stored.changed.connect(self.refresh_soon)

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        if self.elsewhere:
            self.message.emit("info", f"Capturing {self.elsewhere}: this window shows what it stores.")
        if self.watch and not self.running:
            self.service.start()
            self.running = True
            self.refresh_soon()  # the sources now say "watching"

    def stop(self) -> None:
        """Stop watching (window closing; the runtime's service is the runtime's to stop); imports still running are
        given a moment to finish."""
        self._stored.close()
        if self.running:
            self.running = False
            if self.owns_service:
                self.service.stop()
        for thread in self.imports:
            thread.join(timeout=5)
        self.imports.clear()

    def refresh_soon(self) -> None:
        if not self._timer.isActive():
            self._timer.start()

    def sources(self) -> list[SourceStatus]:
        found = self.service.status()
        if self.elsewhere:
            return [replace(s, state=f"capturing {self.elsewhere}") for s in found]
        return found

    def on_runtime_event(self, event: dict) -> None:
        """The runtime stored something it captured (its watcher, or the daemon's): show it."""
        if event.get("type") == "capture":
            self.refresh_soon()

    # --- imports -------------------------------------------------------------------------------
    def import_paths(self, paths: list[str]) -> None:
        """Import files and folders on a worker thread; the result comes back as a status message."""
        self.message.emit("info", f"Importing {len(paths)} dropped item{'s' * (len(paths) != 1)}…")
        thread = threading.Thread(target=self._import, args=(list(paths),), name="capture-import", daemon=True)
        self.imports = [t for t in self.imports if t.is_alive()] + [thread]
        thread.start()

    def _import(self, paths: list[str]) -> None:
        try:
            self._imported.emit(import_paths(self.ingestor, paths, origin="drop"), len(paths))
        except Exception as exc:  # noqa: BLE001 - reported to the user, the app goes on
            self._imported.emit(exc, len(paths))

    def _on_imported(self, report: ImportReport | Exception, _dropped: int) -> None:
        if isinstance(report, Exception):
            self.message.emit("error", f"Import failed: {report.__class__.__name__}: {report}")
        else:
            self.message.emit(*describe(report))
        self.refresh_soon()

    # --- project rules -------------------------------------------------------------------------
    def keep_out(self, project: str) -> None:
        """Add a project to the exclude rules and save them; new ingests of its sessions are skipped."""
        if self.config_problem:
            self.message.emit("error", f"Not saved: {self.config_problem}")
            return
        if project not in self.config.exclude:
            self.config.exclude.append(project)
        try:
            where = self.config.save(self.config_path)
        except OSError as exc:
            self.message.emit("error", f"Could not save the capture settings: {exc}")
            return
        self.message.emit("info", f"Keeping '{project}' out from now on (saved to {where}). Sessions already "
                                  "stored stay until their files change.")


def describe(report: ImportReport) -> tuple[str, str]:
    """A one-line status for an import: counts, datasets' verdicts, refusals."""
    files = len(report.transcripts) + len(report.datasets) + report.unchanged
    lines, stored, quarantined, skipped = report.counts()
    text = (f"Imported {files} file{'s' * (files != 1)}: {lines} lines, {stored} stored, "
            f"{quarantined} quarantined, {skipped} skipped")
    if report.unchanged:
        text += f" ({report.unchanged} already stored)"
    verdicts = [f"{c.path.name} ({c.spec or 'unknown format'}) {'accepted' if c.accepted else 'refused'}"
                for c in report.datasets]
    if verdicts:
        text += ". Datasets: " + ", ".join(verdicts)
    refused = report.refused()
    if refused:
        return "error", text + ". Refused: " + " | ".join(refused[:3]) + (" …" if len(refused) > 3 else "")
    return "info", text


# --- drop routing (cheap: one line of the file) ----------------------------------------------------
def first_record(path: str | Path) -> object:
    """The first non-blank line of a file parsed as JSON; None when unreadable, not JSON or a folder."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
        line = next((raw for raw in head.splitlines() if raw.strip()), b"")
        return json.loads(line.decode("utf-8-sig")) if line else None
    except (OSError, ValueError):
        return None


def is_chat_file(path: str | Path) -> bool:
    """A chat `messages` JSONL file (what the Training tab trains on)."""
    rec = first_record(path) if Path(path).is_file() and Path(path).suffix == ".jsonl" else None
    return isinstance(rec, dict) and "messages" in rec and not transcript_kind(rec)


def redirect_note(path: str | Path) -> str:
    """Why a file dropped on the Training tab goes to Capture instead of starting a job."""
    name, rec = Path(path).name, first_record(path)
    if kind := transcript_kind(rec):
        return f"{name} is a {kind} transcript: it is imported on the Capture tab, not trained on."
    label = shape_name(rec)
    what = f"is {label}, not chat `messages`" if label else "is not a chat `messages` file"
    return f"Not started — {name} {what}. It was sent to the Capture tab to be checked and registered."
