"""A transcript made ready to store: parsed by its agent's parser, its lines counted per file, checked against the
project rules and scrubbed (in pieces: a huge session's joined text would cost several times its size)."""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePath

from app.core.base import paths
from app.core.base.lines import Reading
from app.core.capture import actors, agents, rows
from app.core.capture.session import Session
from app.core.capture.sources import CaptureConfig
from app.core.capture.spill import SPILL_FILE_BYTES, Spill
from app.core.scrub.scrubber import Scrubber

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
Records = tuple[list[dict], list[tuple]]  # a session's rows (its own and its sub-agents'), its message rows
SCRUB_CHARS = 4 * 1024**2  # text scrubbed per pass (see scrub)


@dataclass
class FileCounts:
    """One file's cumulative line accounting: lines = stored + quarantined + skipped."""

    lines: int = 0
    stored: int = 0
    quarantined: int = 0
    skipped: int = 0
    offset: int = 0
    problems: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class Prepared:
    """A session read, counted, checked against the project rules and scrubbed: ready to be written."""

    main: Path
    agent: str
    session: Session | None  # None: kept out by a project rule
    counts: dict[Path, FileCounts]
    secrets: int
    native_id: str | None = None  # the agent's own session id, when the file is named by it
    spill: Spill | None = None  # where a huge transcript's messages are while it waits to be written
    records: Records | None = None  # its rows, made by a prepare worker for the id `key` (the session then is None)
    key: str = ""
    sent_at: datetime | None = None  # when it was sent to a worker (its files' rows stored since: it is stale)

    @property
    def size(self) -> int:
        """Bytes read for it (every file from its start)."""
        return sum(c.offset for c in self.counts.values())

    @property
    def kept(self) -> bool:
        """False when a project rule kept it out."""
        return self.session is not None or self.records is not None

    def head(self) -> tuple[str | None, int]:
        """The kept session's source path and message count (what decides between two copies of it)."""
        if self.records is not None:
            top = self.records[0][0]
            return top["source_path"], top["messages"]
        return self.session.source_path, len(self.session.messages)

    def rows_for(self, sid: str) -> tuple[list[dict], Iterator[tuple]]:
        """The kept session's rows stored as `sid` (a worker's rows are moved to it when it guessed another)."""
        if self.records is not None:  # moved in place: a batch written again file by file moves them from `sid`
            made, self.key = rows.rekey(*self.records, self.key, sid), sid
            return made
        return rows.session_records(sid, self.session)

    def with_rows(self, key: str) -> Prepared:
        """This, with its rows made now for the id `key` and the session let go (what a worker sends back)."""
        if self.session is not None:
            sessions, messages = rows.session_records(key, self.session)
            self.records, self.key, self.session = (sessions, list(messages)), key, None
        return self

    def close(self) -> None:
        """Once written (or given up): the spill's file is deleted, and the session with it."""
        if self.spill is not None:
            self.spill.close()
            self.session = None


def prepare(main: Path, agent: str, final: bool, config: CaptureConfig, scrubber: Scrubber,
            reading: Reading | None = None, spill_dir: Path | None = None) -> Prepared:
    """A huge transcript (SPILL_FILE_BYTES and up) of an agent whose parser `spills` keeps its records, then its
    messages, in a spill file in `spill_dir` until written: the caller closes the Prepared."""
    row = agents.AGENTS[agent]
    spill = _spill(spill_dir) if row.spills and file_size(main) >= SPILL_FILE_BYTES else None
    try:
        kw = {"spill": spill} if spill is not None else {}
        session = agents.load(row.parser)(main, final=final, progress=reading, **kw)
        counts = {f: counts_of(agent, s) for f, s in group_files(main, session).items()}
        keep = config.keeps(session.project, session.cwd)
        actors.mark(session, actors.students(config))
        before = scrubber.report.total
        if keep:
            scrub(scrubber, session)
    except BaseException:
        if spill is not None:
            spill.close()
        raise
    return Prepared(main, agent, session if keep else None, counts, scrubber.report.total - before,
                    own_id(main, session.session_id), spill)


def _spill(spill_dir: Path | None) -> Spill | None:
    """A spill in the data dir's work folder; None (the texts stay in memory) where no file can be made there."""
    try:
        return Spill(spill_dir or paths.work_dir())
    except OSError:
        return None


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # the parser says what is wrong with it


def scrub(scrubber: Scrubber, session: Session, chars: int = SCRUB_CHARS) -> None:
    """scrubber.session() over messages of about `chars` of text at a time: it scrubs the texts it is given as one
    joined string, which for a huge session whole costs several times its text; the result is the same."""
    branches, subagents = [session.messages, *session.abandoned], session.subagents
    session.messages, session.abandoned, session.subagents = [], [], []
    try:
        scrubber.session(session)  # its own fields
    finally:
        session.messages, session.abandoned, session.subagents = branches[0], branches[1:], subagents
    for branch in branches:  # gone through once (a huge session's messages are read back from its spill)
        start, piece, size = 0, [], 0
        for end, message in enumerate(branch, 1):
            piece.append(message)
            size += sum([len(p.text) for p in message.parts])  # Part.chars
            if size >= chars or end == len(branch):
                branch[start:end] = scrubber.session(Session(session.agent, session.session_id, "",
                                                             messages=piece)).messages
                start, piece, size = end, [], 0
    for sub in subagents:
        scrub(scrubber, sub, chars)


def own_id(path: PurePath, native: str | None) -> str | None:
    """The agent's session id when the file is named by it (a uuid: `<sessionId>.jsonl`, a rollout's tail, Gemini's
    first eight characters), else None: a copy of such a file anywhere is the same session; an id the file does not
    carry in its name (hand-named exports, resumed sessions' inherited ids) says nothing."""
    if not native or not UUID.fullmatch(native) or native[:8].lower() not in PurePath(path).name.lower():
        return None
    return native


def group_files(main: Path, session: Session) -> dict[Path, Session]:
    """The files read for this session, each with the Session that counted its lines."""
    files = {main: session}
    for sub in session.subagents:
        if sub.source_path != session.source_path:
            files[Path(sub.source_path)] = sub
    return files


def counts_of(agent: str, s: Session) -> FileCounts:
    """Line accounting for one file: blank and rule-skipped lines are skipped, problem lines quarantined."""
    bad = sorted({n for n, _ in s.problems})
    line_level = {k: v for k, v in s.skipped.items() if not k.startswith("block:")}
    skipped = s.blank + sum(line_level.values())
    row = agents.named(agent)
    stored = s.used if row is not None and row.counts_used else s.lines - skipped - len(bad)
    first = {}
    for n, why in s.problems:
        first.setdefault(n, why)
    return FileCounts(lines=s.lines, stored=stored, quarantined=len(bad), skipped=s.lines - stored - len(bad),
                      offset=s.end_offset, problems=sorted(first.items()))


@dataclass
class Delta:
    """What an ingest adds to a file's counts (capture_files' row): its new lines and problems."""

    lines_in: int
    stored: int
    quarantined: int
    skipped: int
    new_problems: list[tuple[int, str]]


def delta(c: FileCounts, row, excluded: bool) -> Delta:
    """What this ingest adds to what the file's row already counted (all of it for a new or replaced file)."""
    stored, skipped = (0, c.skipped + c.stored) if excluded else (c.stored, c.skipped)
    if row is None or c.lines < row.lines:
        return Delta(c.lines, stored, c.quarantined, skipped, c.problems)
    new = [(n, why) for n, why in c.problems if n > row.lines]
    quarantined = len(new)
    lines_in = c.lines - row.lines
    stored_delta = stored - row.stored
    return Delta(lines_in, stored_delta, quarantined, lines_in - stored_delta - quarantined, new)
