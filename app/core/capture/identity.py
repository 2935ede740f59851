"""Which file and which stored session a transcript is: its real path, a new session's key, the file that owns a
sub-agent's file, the stored session a file holds (copies by the agent's own id), and whether a file changed."""
from __future__ import annotations

import hashlib
from pathlib import Path, PurePath

from app.core.base.schema import AgentSession, CaptureFile
from app.core.base.store import driver_rows, marks
from app.core.capture import agents
from app.core.capture.prepare import FileCounts, own_id


def real_path(path: str | Path) -> Path:
    """How the capture knows a file: its resolved path (`..`, symlinks and `~` undone), whatever spelling named it."""
    return Path(path).expanduser().resolve()


def session_key(agent: str, main: Path) -> str:
    """A new session's id: agent + its file's real path (session ids can repeat across files)."""
    return hashlib.sha1(f"{agent}\0{main}".encode()).hexdigest()[:20]


def session_id_for(conn, agent: str, main: Path, native: str | None, row) -> str:
    """The stored session this file holds: the one it was stored as before, else a stored copy's (the same agent
    session id, named by its file too), else a new key."""
    if row is not None and row.session_id:
        return row.session_id
    if native:  # on the driver (store.driver_rows): a scan asks this of every new session
        for sid, source in driver_rows(conn, AgentSession.__table__, ("id", "source_path"),
                                       "agent = {} AND native_id = {} AND parent_id IS NULL ORDER BY id",
                                       (agent, native)):
            if own_id(PurePath(source), native):
                return sid
    return session_key(agent, main)


def release_copies(conn, sid: str, counts: dict[Path, FileCounts]) -> int:
    """Other files held as this session (a copy being replaced by a fuller one): their stored lines become skipped;
    how many."""
    table = CaptureFile.__table__
    others = driver_rows(conn, table, ("id", "stored"),
                         f"session_id = {{}} AND stored > 0 AND path NOT IN ({marks(len(counts))})",
                         (sid, *[str(f) for f in counts]))
    for row_id, stored in others:
        conn.execute(table.update().where(table.c.id == row_id).values(  # not an ingest of it: its time stays
            stored=0, skipped=table.c.skipped + stored, updated_at=table.c.updated_at))
    return sum(stored for _, stored in others)


def owner(agent: str, path: Path) -> Path | None:
    """The file whose session this file belongs to (a sub-agent's file -> its session's file, by the agent's `owner`;
    None: an internal file, not a session)."""
    found = agents.named(agent)
    return agents.load(found.owner)(path) if found is not None and found.owner else path


def changed(row, stat, final: bool) -> bool:
    if row is None or row.size != stat.st_size or row.mtime != stat.st_mtime:
        return True
    return final and row.offset < stat.st_size
