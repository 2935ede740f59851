"""Capture: one transcript under several path spellings (`/a/../b/x.jsonl` and `/b/x.jsonl`, a symlinked
`~/.claude`), and copies of one agent session (a file named by the agent's session id, found in two places), are
stored once. Followed files are known by their resolved path from now on; the duplicates earlier versions stored are
merged: the copy with the most messages stays, every row that named another copy (datasets' sessions, held-out sets,
marks, followed files, sub-agents, cycles' records) names the one kept, and the lines the others had stored are
counted as skipped in one `merge` import, so the counts still balance. Nothing is lost: a sub-agent only a dropped copy
had moves to the copy kept. An index on `sessions.native_id` finds a stored copy at ingest.

Revision ID: 0010
Revises: 0009
"""
import os
import re
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import PurePath

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# the rule of app/core/capture/ingest.own_id as it was at this revision: a uuid the file's name carries
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
CYCLE_JSON = ("inputs_json", "outputs_json", "report_json")
IMPORTS = sa.table("imports", *(sa.column(c) for c in ("origin", "kind", "agent", "path", "lines_in", "stored",
                                                       "quarantined", "skipped", "status", "message")),
                   sa.column("created_at", sa.DateTime(timezone=True)))


def upgrade() -> None:
    op.create_index("ix_sessions_native_id", "sessions", ["native_id"])
    conn = op.get_bind()
    keep_of = _groups(conn)
    for dup, keep in keep_of.items():
        if dup != keep:
            _fold(conn, dup, keep)
    moved = _files(conn, keep_of)
    merged = sum(dup != keep for dup, keep in keep_of.items())
    if merged or moved:
        conn.execute(sa.insert(IMPORTS).values(
            origin="merge", kind="transcript", agent=None, path="(store upgrade 0010)", lines_in=0, stored=-moved,
            quarantined=0, skipped=moved, status="ok", created_at=datetime.now(UTC),
            message=f"{merged} duplicate session{'s' * (merged != 1)} merged into the copy with the most messages "
                    f"(one file under several spellings, or copies of one agent session): the {moved} lines the "
                    f"others had stored are counted as skipped"))


def downgrade() -> None:
    op.drop_index("ix_sessions_native_id", "sessions")  # merged sessions stay merged


def _own_id(source_path: str | None, native: str | None) -> bool:
    return bool(native and UUID.fullmatch(native) and native[:8].lower() in PurePath(source_path or "").name.lower())


def _groups(conn) -> dict[str, str]:
    """Top-level session id -> the id of the copy kept, for every session that has a duplicate (itself included)."""
    tops = {r.id: r for r in conn.execute(sa.text(
        "SELECT id, agent, native_id, source_path, messages, updated_at FROM sessions WHERE parent_id IS NULL"))}
    parent: dict[str, str] = {}

    def find(sid: str) -> str:
        while parent.setdefault(sid, sid) != sid:
            sid = parent[sid]
        return sid

    def join(sids: list[str]) -> None:
        for other in sids[1:]:
            parent[find(other)] = find(sids[0])

    by_file: dict[str, list[str]] = defaultdict(list)
    for path, sid in conn.execute(sa.text("SELECT path, session_id FROM capture_files")):
        if sid in tops and sid not in by_file[os.path.realpath(path)]:
            by_file[os.path.realpath(path)].append(sid)
    by_native: dict[tuple, list[str]] = defaultdict(list)
    for s in tops.values():
        if _own_id(s.source_path, s.native_id):
            by_native[(s.agent, s.native_id)].append(s.id)
    for sids in [*by_file.values(), *by_native.values()]:
        join(sids)
    members: dict[str, list[str]] = defaultdict(list)
    for sid in list(parent):
        members[find(sid)].append(sid)
    keep_of = {}
    for sids in members.values():
        if len(sids) > 1:
            keep = max(sids, key=lambda s: (tops[s].messages or 0, str(tops[s].updated_at or ""), s))
            keep_of.update({sid: keep for sid in sids})
    return keep_of


def _fold(conn, dup: str, keep: str) -> None:
    """Session dup becomes keep: its sub-agents fold into keep's of the same agent id (or move to keep), every
    reference is re-pointed, then its rows go."""
    theirs = dict(conn.execute(sa.text("SELECT native_id, id FROM sessions WHERE parent_id = :s"), {"s": keep}).all())
    for sub, native in conn.execute(sa.text("SELECT id, native_id FROM sessions WHERE parent_id = :s"),
                                    {"s": dup}).all():
        if native in theirs:
            _fold(conn, sub, theirs[native])
        else:
            conn.execute(sa.text("UPDATE sessions SET parent_id = :k WHERE id = :s"), {"k": keep, "s": sub})
    _repoint(conn, dup, keep)
    conn.execute(sa.text("DELETE FROM messages WHERE session_id = :s"), {"s": dup})
    conn.execute(sa.text("DELETE FROM sessions WHERE id = :s"), {"s": dup})


def _repoint(conn, old: str, new: str) -> None:
    ids = {"o": old, "n": new}
    conn.execute(sa.text("UPDATE dataset_sessions SET session_id = :n WHERE session_id = :o"), ids)
    conn.execute(sa.text("DELETE FROM heldout WHERE session_id = :o AND base_model IN "
                         "(SELECT base_model FROM heldout WHERE session_id = :n)"), ids)
    conn.execute(sa.text("UPDATE heldout SET session_id = :n WHERE session_id = :o"), ids)
    marks = dict(conn.execute(sa.text("SELECT session_id, created_at FROM session_marks WHERE session_id IN (:o, :n)"),
                              ids).all())
    if old in marks:  # a person's word on either copy stays; on both, the newer one
        if new in marks and str(marks[new]) >= str(marks[old]):
            conn.execute(sa.text("DELETE FROM session_marks WHERE session_id = :o"), ids)
        else:
            conn.execute(sa.text("DELETE FROM session_marks WHERE session_id = :n"), ids)
            conn.execute(sa.text("UPDATE session_marks SET session_id = :n WHERE session_id = :o"), ids)
    find = "strpos" if conn.dialect.name == "postgresql" else "instr"  # the same function, by each dialect's name
    for column in CYCLE_JSON:
        conn.execute(sa.text(f"UPDATE cycles SET {column} = replace({column}, :o, :n) WHERE {find}({column}, :o) > 0"),
                     ids)


def _files(conn, keep_of: dict[str, str]) -> int:
    """One row per resolved path (the kept session's, else the one read furthest), renamed to that path and pointed
    at the kept session; a copy's rows count their stored lines as skipped. The lines moved to skipped."""
    rows = conn.execute(sa.text('SELECT id, path, session_id, lines, "offset", stored FROM capture_files')).all()
    by_real: dict[str, list] = defaultdict(list)
    for row in rows:
        by_real[os.path.realpath(row.path)].append(row)
    moved = 0
    for real, group in by_real.items():
        best = max(group, key=lambda r: (keep_of.get(r.session_id, r.session_id) == r.session_id, r.lines or 0,
                                         r.offset or 0, r.id))
        for row in group:
            if row is not best:
                moved += row.stored or 0
                conn.execute(sa.text("DELETE FROM capture_files WHERE id = :i"), {"i": row.id})
        values = {"i": best.id, "p": real, "s": keep_of.get(best.session_id, best.session_id)}
        if best.session_id != values["s"]:  # a copy of the session kept: its lines are no longer stored
            moved += best.stored or 0
            conn.execute(sa.text("UPDATE capture_files SET skipped = skipped + stored, stored = 0 WHERE id = :i"),
                         values)
        conn.execute(sa.text("UPDATE capture_files SET path = :p, session_id = :s WHERE id = :i"), values)
    return moved
