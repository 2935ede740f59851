"""Ingest transcript files into the store: parse, scrub, apply project rules, store, count and quarantine.

A file is re-read when its size or mtime changed since the last ingest; its byte offset (after the last complete
line) and cumulative counts live in capture_files, so each new line is counted exactly once, a half-written last
line waits for its newline, and a restart repeats nothing. A session's rows are replaced as a whole in one
transaction, so the store always holds exactly one copy of every record read.

A file is known by its resolved path (`real_path`: `/a/../b/x.jsonl`, `/b/x.jsonl` and a symlinked `~/.claude` are
one file), and a session by the file it was first stored from (`capture_files.session_id`) or, when the transcript
names itself with the agent's own session id (`<sessionId>.jsonl`, a Codex rollout's uuid, Gemini's
`session-…-<id8>.json`), by that id: a copy of a session file elsewhere is the same session. Of two copies the one
with more messages is kept; the other's lines are counted as skipped (status `copy`).
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from sqlalchemy import insert, select

from app.core.base.clock import as_utc
from app.core.base.schema import AgentSession, CaptureFile, ImportRow, MessageRow, QuarantineRow, utcnow
from app.core.base.lines import Reading, line_excerpts
from app.core.base.store import Store, driver_execute, driver_rows, insert_many, marks, update_row
from app.core.capture import agents, rows
from app.core.capture.batch import Batch, Sent, reads
from app.core.capture.detect import detect_format
from app.core.capture.identity import changed, owner, real_path, release_copies, session_id_for, session_key
from app.core.capture.pool import PreparePool, default_workers
from app.core.capture.prepare import FileCounts, Prepared, delta, file_size, prepare
from app.core.capture.sources import CaptureConfig
from app.core.capture.spill import SPILL_FILE_BYTES
from app.core.scrub.scrubber import Scrubber

IDLE_FINAL_S = 120.0  # a file unchanged this long is finished: a last line without newline is taken
MAX_EXCERPT = 64 * 1024  # quarantined line text kept (scrubbed)
BATCH_FILES = 100  # ingest_many writes the sessions of up to this many files in one transaction...
BATCH_BYTES = 16 * 1024**2  # ...or fewer, once they read this many bytes (a bound on what a batch holds)
INSERT_ROWS = 2000  # message rows per executemany
COPY = "a copy of a session already stored from a fuller file: its lines are counted as skipped"
FILE_COLUMNS = tuple(c.name for c in CaptureFile.__table__.columns)


@dataclass
class IngestResult:
    """What one ingest did (the delta since the previous ingest of the same files)."""

    path: Path
    agent: str | None
    origin: str
    status: str = "ok"  # ok | excluded | copy | refused | error
    message: str = ""
    sessions: list[str] = field(default_factory=list)
    lines_in: int = 0
    stored: int = 0
    quarantined: int = 0
    skipped: int = 0
    import_id: int | None = None

    @property
    def balanced(self) -> bool:
        return self.lines_in == self.stored + self.quarantined + self.skipped


class Ingestor:
    """Thread-safe: one ingest at a time per process (SQLite serialises writers across processes)."""

    batch_files, batch_bytes = BATCH_FILES, BATCH_BYTES  # ingest_many's transactions (an instance may set others)
    workers: int  # ingest_many's prepare workers (1: none; the capture settings' `workers`, else one per core)...
    parallel_bytes: int | None = BATCH_BYTES  # ...started once a scan knows it reads this much (None: never)

    def __init__(self, store: Store, config: CaptureConfig | None = None, scrubber: Scrubber | None = None,
                 reading: Reading | None = None) -> None:
        self.store, self.config = store, config or CaptureConfig()
        self.workers = self.config.workers or default_workers()
        self.scrubber = scrubber or Scrubber()
        self.reading = reading  # told (file, bytes read, its size) while a file is read: a big file's progress
        self._lock = threading.Lock()

    def ingest(self, path: str | Path, origin: str = "watch", agent: str | None = None,
               final: bool | None = None) -> IngestResult | None:
        """Ingest a transcript file if it changed; None when there was nothing new."""
        path = real_path(path)
        with self._lock:
            plan = self._plan(path, origin, final, agent)
            return self._run(path, plan, origin) if isinstance(plan, tuple) else plan

    def ingest_many(self, paths: list[Path], origin: str = "scan", final: bool | None = None,
                    progress: Callable[[int, int, Path], None] | None = None) -> list[IngestResult | None]:
        """ingest() for many files (scans, imports), with progress: the sessions of up to BATCH_FILES files (or
        BATCH_BYTES read) are written in one transaction; a session is read once even when several of its files are
        listed. When a batch's transaction fails, each of its files is written alone, as ingest() would. When more
        than `parallel_bytes` are to be read, all but the first batch are prepared by `workers` processes
        (`capture.pool`) while this one writes."""
        files = [real_path(p) for p in paths]
        out: list[IngestResult | None] = [None] * len(files)
        mains: set[Path] = set()
        start, pool = 0, None  # pool None: not decided yet; False: none in this scan (or they could not start)
        planned: deque[Batch] = deque()
        try:
            while start < len(files) or planned:
                with self._lock:  # held for one batch: the watcher's ingest() waits at most that long
                    if pool is None:
                        start, pool = self._ahead(files, start, origin, final, mains, planned)
                    elif not planned:
                        start = self._plan_batch(files, start, origin, final, mains, pool or None, planned)
                    current = planned.popleft()
                    try:  # the workers read the next batch while this one is written
                        if pool and start < len(files) and not planned:
                            start = self._plan_batch(files, start, origin, final, mains, pool, planned)
                    finally:  # written also when planning the next one failed: nothing already read is lost
                        self._finish_batch(current, origin, out, progress, len(files))
        finally:
            for batch in planned:  # left by an error: what the workers were still reading is not wanted
                batch.cancel()
            if pool:
                pool.close()
        return out

    def _ahead(self, files: list[Path], start: int, origin: str, final: bool | None, mains: set[Path],
               planned: deque[Batch]) -> tuple[int, PreparePool | bool]:
        """The scan's first batches planned (nothing read yet) until more than `parallel_bytes` are known to be read,
        then workers started (warming up while this process prepares the first batch; `parallel_bytes` 0: that one
        too is theirs) and sent the others; where they can prepare as this process would: more than one, and the
        scrubber the one they make. False: none in this scan (none wanted, too little to read, or they could not
        start: it goes on in this process)."""
        wanted, size = self.parallel_bytes is not None and self.workers > 1 and type(self.scrubber) is Scrubber, 0
        while start < len(files) and (not planned or (wanted and size < self.parallel_bytes)):
            start = self._plan_batch(files, start, origin, final, mains, None, planned)
            size += planned[-1].size
        keep = 1 if self.parallel_bytes else 0  # batches prepared here
        if not wanted or size < self.parallel_bytes or (start >= len(files) and len(planned) <= keep):
            return start, False
        pool = PreparePool(self.workers, self.config, self.scrubber.home)
        try:
            pool.warm()
        except Exception:  # noqa: BLE001 - no process to be had (out of memory, of file handles): done here
            pool.close()
            return start, False
        for batch in list(planned)[keep:]:
            batch.jobs = [(i, path, self._send(pool, item) if isinstance(item, tuple) else item)
                          for i, path, item in batch.jobs]
        return start, pool

    def _plan_batch(self, files: list[Path], start: int, origin: str, final: bool | None, mains: set[Path],
                    pool: PreparePool | None, planned: deque[Batch]) -> int:
        """Plan files from `start` until the batch is full, sending each to the pool, if any; the batch is added to
        `planned`, the index of the next batch's first file returned."""
        chunk = files[start:start + self.batch_files]
        known = self._file_rows(chunk)
        batch = Batch(jobs=[], end=start + len(chunk))
        for index, path in enumerate(chunk, start):
            plan = self._plan(path, origin, final, known=known)
            if isinstance(plan, tuple):
                seen = plan[0] in mains
                mains.add(plan[0])
                size = 0 if seen else reads(plan[0], plan[1])
                batch.size += size
                plan = None if seen else self._send(pool, plan) if pool else plan
            batch.jobs.append((index, path, plan))
            if batch.size >= self.batch_bytes:
                batch.end = index + 1
                break
        planned.append(batch)
        return batch.end

    def _finish_batch(self, batch: Batch, origin: str, out: list[IngestResult | None],
                      progress: Callable[[int, int, Path], None] | None, total: int) -> None:
        """Prepare or collect the batch's files in order, write them (also when preparing one raised: nothing already
        read is lost), fill `out`."""
        pending: list[tuple[int, Path, Prepared]] = []
        try:
            for index, path, item in batch.jobs:
                ready = self._collect(path, item, origin)
                if isinstance(ready, Prepared):
                    pending.append((index, path, ready))
                else:
                    out[index] = ready
                if progress:
                    progress(index + 1, total, path)
        finally:
            batch.cancel()
            try:
                self._write_batch(pending, origin, out)
            finally:
                for _, _, ready in pending:
                    ready.close()

    def _send(self, pool: PreparePool | None, plan: tuple[Path, str, bool]):
        """The plan, or a worker's future for it, sent now (a huge file is prepared here: its texts spill, its
        progress shows)."""
        if pool is None or file_size(plan[0]) >= SPILL_FILE_BYTES:
            return plan
        main, agent, final = plan
        try:
            return Sent(pool.submit(main, agent, final, session_key(agent, main)), plan, utcnow())
        except BrokenProcessPool:
            return plan

    def _collect(self, path: Path, item, origin: str) -> Prepared | IngestResult | None:
        """A planned file prepared here, a worker's prepared file (its scrub counts added to this scrubber's), or
        what the plan already answered."""
        if isinstance(item, tuple):
            return self._prepare(path, item, origin)
        if not isinstance(item, Sent):
            return item
        try:
            ready, replaced = item.future.result()
        except OSError as exc:
            return self.fail(path, item.plan[1], origin, f"could not read the file: {exc.strerror or exc}")
        except BrokenProcessPool:  # a worker died (killed, out of memory): this file is prepared here
            return self._prepare(path, item.plan, origin)
        for kind, n in replaced.items():
            self.scrubber.report.counts[kind] = self.scrubber.report.counts.get(kind, 0) + n
        ready.sent_at = item.sent_at
        return ready

    # --- steps -----------------------------------------------------------------------------------
    def _plan(self, path: Path, origin: str, final: bool | None, agent: str | None = None,
              known: dict[str, Any] | None = None):
        """(main, agent, final) when the file needs reading, else what ingest() answers without reading it (known:
        capture_files rows already read for a batch)."""
        agent = agent or self.config.agent_for(path) or detect_format(path)
        if agent not in agents.AGENTS:
            return self._refuse(path, origin, f"not a {agents.titles()} transcript")
        main = owner(agent, path)
        try:
            stat = path.stat()
        except OSError as exc:
            return self.fail(path, agent, origin, f"could not read the file: {exc.strerror or exc}")
        final = (time.time() - stat.st_mtime > IDLE_FINAL_S) if final is None else final
        row = (known if known is not None else self._file_rows([path])).get(str(path))
        if main is None or not changed(row, stat, final):
            return None  # internal files (compaction agents) are not sessions; unchanged files need nothing
        return main, agent, final

    def _prepare(self, path: Path, plan: tuple[Path, str, bool], origin: str) -> Prepared | IngestResult:
        main, agent, final = plan
        try:
            return prepare(main, agent, final, self.config, self.scrubber, self.reading)
        except OSError as exc:
            return self.fail(path, agent, origin, f"could not read the file: {exc.strerror or exc}")

    def _run(self, path: Path, plan: tuple[Path, str, bool], origin: str) -> IngestResult:
        ready = self._prepare(path, plan, origin)
        if not isinstance(ready, Prepared):
            return ready
        try:
            return self._write_alone(path, ready, origin)
        finally:
            ready.close()

    def _file_rows(self, files: list[Path]) -> dict[str, Any]:
        """capture_files rows by path (a look before reading; _write reads them again in its transaction)."""
        table = CaptureFile.__table__
        with self.store.engine.connect() as conn:
            return {r.path: r for r in conn.execute(select(table).where(table.c.path.in_([str(f) for f in files])))}

    def _write_batch(self, pending: list[tuple[int, Path, Prepared]], origin: str,
                     out: list[IngestResult | None]) -> None:
        """Prepared sessions in one transaction; if it fails, each alone (a failing file then fails by itself, the
        others are stored; an error that is not about reading a file is raised after the others are written)."""
        if not pending:
            return
        try:
            with self.store.engine.begin() as conn:
                done = [self._write(conn, ready, origin) for _, _, ready in pending]
        except Exception:  # noqa: BLE001 - rolled back as a whole: written again one by one below
            if len(pending) == 1:
                index, path, ready = pending[0]
                out[index] = self._write_alone(path, ready, origin)
                return
            first: Exception | None = None
            for index, path, ready in pending:
                try:
                    out[index] = self._write_alone(path, ready, origin)
                except Exception as exc:  # noqa: BLE001 - the others are written first, then it is raised
                    first = first or exc
            if first is not None:
                raise first
            return
        for (index, _, _), result in zip(pending, done):
            out[index] = result

    def _write_alone(self, path: Path, ready: Prepared, origin: str) -> IngestResult | None:
        """One prepared session in its own transaction; a file gone unreadable meanwhile is recorded as failed."""
        try:
            with self.store.engine.begin() as conn:
                return self._write(conn, ready, origin)
        except OSError as exc:
            return self.fail(path, ready.agent, origin, f"could not read the file: {exc.strerror or exc}")

    def _write(self, conn, ready: Prepared, origin: str) -> IngestResult | None:
        """Store one prepared session inside the caller's transaction (capture_files are read in it: another
        process may ingest concurrently)."""
        main, agent, counts, secrets = ready.main, ready.agent, ready.counts, ready.secrets
        kept = ready.kept
        result = IngestResult(main, agent, origin, status="ok" if kept else "excluded",
                              message="" if kept else "kept out by a project rule")
        previous = {r.path: r for r in driver_rows(  # on the driver (store.driver_rows), as the writes below
            conn, CaptureFile.__table__, FILE_COLUMNS, f"path IN ({marks(len(counts))})", [str(f) for f in counts])}
        if ready.sent_at is not None and any(as_utc(r.updated_at) >= ready.sent_at for r in previous.values()):
            return None  # stored meanwhile by another ingest (the watcher's, another process'): what it read stands
        sid = session_id_for(conn, agent, main, ready.native_id, previous.get(str(main)))
        held = next(iter(driver_rows(conn, AgentSession.__table__, ("source_path", "messages"), "id = {}", (sid,))),
                    None)
        moved = 0
        source, messages = ready.head() if kept else (None, 0)
        if kept and held is not None and held.source_path != source \
                and held.messages > messages:  # an older copy: the fuller one stays
            kept, result.status, result.message = False, "copy", COPY
        else:
            moved = release_copies(conn, sid, counts) if held is not None else 0
            driver_execute(conn, "DELETE FROM sessions WHERE id = {} OR parent_id = {}", (sid, sid))  # messages too
        if kept:  # the rows go straight to the driver (store.insert_many): the same values, far less Python
            sessions, messages = ready.rows_for(sid)
            sessions[0]["secrets_scrubbed"] = secrets
            insert_many(conn, AgentSession.__table__, sessions)
            while chunk := list(itertools.islice(messages, INSERT_ROWS)):  # a huge session's rows: a chunk at a time
                insert_many(conn, MessageRow.__table__, chunk, keys=rows.MESSAGE_COLUMNS)
            result.sessions = [s["id"] for s in sessions]
        deltas = {f: delta(c, previous.get(str(f)), not kept) for f, c in counts.items()}
        for name in ("lines_in", "stored", "quarantined", "skipped"):
            setattr(result, name, sum(getattr(d, name) for d in deltas.values()))
        if moved:  # the copy this file replaced: its stored lines are skipped now
            result.stored, result.skipped = result.stored - moved, result.skipped + moved
        result.import_id = insert_many(conn, ImportRow.__table__, [dict(
            origin=origin, kind="transcript", agent=agent, path=self.scrubber.text(str(main)),
            lines_in=result.lines_in, stored=result.stored, quarantined=result.quarantined,
            skipped=result.skipped, status=result.status, message=result.message, created_at=utcnow(),
        )], returning="id")
        for file, c in counts.items():
            self._quarantine(conn, result.import_id, file, deltas[file].new_problems)
            self._save_file(conn, file, agent, sid, c, previous.get(str(file)), not kept)
        return result

    def _quarantine(self, conn, import_id: int, file: Path, problems: list[tuple[int, str]]) -> None:
        if not problems:
            return
        excerpts = line_excerpts(file, {n for n, _ in problems}, MAX_EXCERPT)
        insert_many(conn, QuarantineRow.__table__, [
            dict(import_id=import_id, source_path=self.scrubber.text(str(file)), line=n, reason=why,
                 excerpt=self.scrubber.text(excerpts.get(n, "")), created_at=utcnow()) for n, why in problems])

    def _save_file(self, conn, file: Path, agent: str, sid: str, c: FileCounts, row,
                   excluded: bool) -> None:
        stat = file.stat()
        values = dict(agent=agent, session_id=sid, offset=c.offset, size=stat.st_size, mtime=stat.st_mtime,
                      lines=c.lines, stored=0 if excluded else c.stored, quarantined=c.quarantined,
                      skipped=c.skipped + (c.stored if excluded else 0), error=None, updated_at=utcnow())
        if row is None:
            insert_many(conn, CaptureFile.__table__, [dict(path=str(file), **values)])
        else:
            update_row(conn, CaptureFile.__table__, row.id, values)

    def _refuse(self, path: Path, origin: str, why: str) -> IngestResult:
        return self._file_problem(path, None, origin, "refused",
                                  f"{path.name}: {why}; nothing was stored (the file is listed in the quarantine)")

    def fail(self, path: Path, agent: str | None, origin: str, why: str) -> IngestResult:
        """Record a file that could not be read at all (an import row and a file-level quarantine entry)."""
        return self._file_problem(path, agent, origin, "error", f"{path.name}: {why}")

    def _file_problem(self, path: Path, agent: str | None, origin: str, status: str, message: str) -> IngestResult:
        shown = self.scrubber.text(str(path))
        with self.store.engine.begin() as conn:
            import_id = conn.execute(insert(ImportRow).values(
                origin=origin, kind="transcript", agent=agent, path=shown, status=status, message=message,
                created_at=utcnow())).inserted_primary_key[0]
            conn.execute(insert(QuarantineRow).values(import_id=import_id, source_path=shown, line=None,
                                                      reason=message, created_at=utcnow()))
        return IngestResult(path, agent, origin, status=status, message=message, import_id=import_id)
