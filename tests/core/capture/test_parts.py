"""A message's parts stored compressed (`capture/rows.pack_parts`, `messages.parts_z`): the round trip, a row of the
old form (`parts_json` only) still read, migration 0014 on a store with rows, and rows written straight to the driver
(`store.insert_many`, `update_row`) and read from it (`driver_rows`), on SQLite and PostgreSQL."""
from __future__ import annotations

import importlib
import json
import zlib
from datetime import datetime
from types import SimpleNamespace

import pytest
from sqlalchemy import insert, inspect, select, text

from app.core.base.schema import AgentSession, CaptureFile, ImportRow, MessageRow, utcnow
from app.core.base.store import driver_rows, insert_many, marks, update_row
from app.core.capture.queries import CaptureQueries
from app.core.capture.rows import LZ4, _part, pack_parts, parts_of, parts_text, unpack
from app.core.capture.session import Part
from tests.pg import ANY_STORE, any_store  # noqa: F401 - fixture

ODD = "naïve 日本語 🙂 \x1c\x1d\x1e \u2028\u2029 \x85 \x00 tab\t \"quoted\" \\ back"
PARTS = [
    [],
    [Part("text", ODD)],
    [Part("thinking", "hmm " * 50), Part("tool_call", "", "Bash", {"command": "ls 日本", "n": 2**70}, "call_1")],
    [Part("tool_result", "line1\nline2\x1e", None, None, "call_1", True)],
    [Part("text", "lone \ud83d half of a pair")],  # orjson refuses it: the standard encoder's ASCII form
    [Part("text", "x" * 200_000)],
]


def row_of(parts: list[Part]) -> SimpleNamespace:
    return SimpleNamespace(**pack_parts([_part(p) for p in parts]))


def test_parts_round_trip_compressed():
    for parts in PARTS:
        row = row_of(parts)
        assert row.parts_json == "" and isinstance(row.parts_z, bytes)
        assert parts_of(row) == parts
        assert parts_of({"parts_json": row.parts_json, "parts_z": row.parts_z}) == parts  # a mapping reads too
        assert [Part(d.get("k"), d.get("t", ""), d.get("n"), d.get("i"), d.get("c"), bool(d.get("e")))
                for d in json.loads(parts_text(row))] == parts
    big = row_of(PARTS[-1])
    assert len(big.parts_z) < 2_000  # 200 kB of one character


def test_a_row_of_the_old_form_is_still_read():
    for parts in PARTS[:-2]:
        plain = json.dumps([_part(p) for p in parts], ensure_ascii=False)
        old = SimpleNamespace(parts_json=plain, parts_z=None)
        assert parts_of(old) == parts and parts_text(old) == plain
        packed = SimpleNamespace(**pack_parts(plain)).parts_z  # the wire's text
        assert packed[:1] == LZ4 and unpack(packed) == plain.encode()
        zlibbed = SimpleNamespace(parts_json="", parts_z=zlib.compress(plain.encode(), 1))  # 0014's form
        assert parts_of(zlibbed) == parts and parts_text(zlibbed) == plain
    assert parts_of(SimpleNamespace(parts_json="", parts_z=None)) == []  # an emptied or missing value: no parts


def _session(s, sid: str) -> None:
    s.add(AgentSession(id=sid, agent="claude", native_id=sid, source_path=f"/a/{sid}.jsonl", messages=len(PARTS)))
    s.flush()


@ANY_STORE
def test_stored_rows_of_both_forms_read_back(any_store):
    with any_store.session() as s:
        _session(s, "sess-1")
        for seq, parts in enumerate(PARTS):
            s.add(MessageRow(session_id="sess-1", seq=seq, role="assistant", text="",
                             **pack_parts([_part(p) for p in parts])))
        s.add(MessageRow(session_id="sess-1", seq=len(PARTS), role="user", text="old",
                         parts_json=json.dumps([_part(p) for p in PARTS[1]], ensure_ascii=False)))
    got = CaptureQueries(any_store).transcript("sess-1")
    assert [m.parts for m in got] == [*PARTS, PARTS[1]]


@ANY_STORE
def test_migration_0014_compresses_existing_rows_and_its_downgrade_restores_them(any_store):
    """Down to 0013, rows of the old form written there (more than one batch), up again: every row compressed and
    read the same; down again: the JSON text back, byte for byte."""
    from alembic import command

    from app.core.base.store import alembic_config

    mig = importlib.import_module("app.core.base.migrations.versions.0014_parts_compressed")
    cfg = alembic_config(any_store.url)
    with any_store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0013")
    texts = [json.dumps([_part(p) for p in PARTS[i % 4]], ensure_ascii=False) for i in range(mig.BATCH + 7)]
    texts[3] = "[]"
    with any_store.engine.begin() as conn:
        conn.execute(text("INSERT INTO sessions (id, agent, native_id, source_path, updated_at, messages) VALUES "
                          "('sess-1', 'claude', 'n1', '/a/s.jsonl', :t, 1)"), {"t": "2026-01-01 00:00:00"})
        conn.execute(text("INSERT INTO messages (session_id, seq, role, text, parts_json) VALUES "
                          "('sess-1', :seq, 'assistant', '', :p)"), [{"seq": i, "p": p} for i, p in enumerate(texts)])
    with any_store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    with any_store.session() as s:
        rows = s.scalars(select(MessageRow).order_by(MessageRow.seq)).all()
        assert len(rows) == len(texts) and all(r.parts_json == "" and r.parts_z for r in rows)
        assert [parts_text(r) for r in rows] == texts
        assert [parts_of(r) for r in rows[:4]] == PARTS[:3] + [[]]
    with any_store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0013")
    with any_store.engine.connect() as conn:
        assert [r[0] for r in conn.execute(text("SELECT parts_json FROM messages ORDER BY seq"))] == texts
        assert "parts_z" not in [c["name"] for c in inspect(conn).get_columns("messages")]
    with any_store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


@ANY_STORE
def test_message_rows_written_straight_to_the_driver_read_back(any_store):
    """store.insert_many and update_row (ingest's path for its rows): the rows' bytes, text, None and integers arrive
    as the ORM's own insert would write them, on SQLite and PostgreSQL; a column the dialect processes (SQLite's
    DateTime: text of SQLAlchemy's format) is stored as SQLAlchemy stores it; a new row's id comes back."""
    with any_store.session() as s:
        _session(s, "sess-2")
    rows = [dict(session_id="sess-2", branch=seq % 2, seq=seq, role="assistant", text=f"naïve 日本語 🙂 {seq}",
                 **pack_parts([_part(p) for p in parts]), tools="Bash" if seq == 2 else "", is_error=int(seq == 3),
                 timestamp=None if seq else "2026-11-27T10:00:00Z", model=None, compact_summary=0, meta=0, line=seq)
            for seq, parts in enumerate(PARTS)]
    when = utcnow()
    with any_store.engine.begin() as conn:
        insert_many(conn, MessageRow.__table__, rows)
        insert_many(conn, MessageRow.__table__, [])  # nothing to write: no statement
        theirs = conn.execute(insert(ImportRow.__table__), dict(origin="scan", kind="transcript", path="/a",
                                                                created_at=when)).inserted_primary_key[0]
        ours = insert_many(conn, ImportRow.__table__, [dict(origin="scan", kind="transcript", path="/b",
                                                            created_at=when)], returning="id")
        assert ours == theirs + 1
        update_row(conn, ImportRow.__table__, ours, dict(path="/c", stored=3))
        update_row(conn, ImportRow.__table__, ours, dict(created_at=when))
        stored = conn.execute(text("SELECT path, stored, created_at FROM imports ORDER BY id")).all()
    assert stored[1] == ("/c", 3, stored[0][2])  # the same text (SQLite) or timestamp (PostgreSQL) as SQLAlchemy's
    with any_store.session() as s:
        assert s.get(ImportRow, ours).created_at == s.get(ImportRow, theirs).created_at
        got = s.scalars(select(MessageRow).where(MessageRow.session_id == "sess-2").order_by(MessageRow.seq)).all()
    assert [parts_of(r) for r in got] == PARTS
    assert [(r.branch, r.text, r.tools, r.is_error, r.timestamp, r.line) for r in got] == [
        (row["branch"], row["text"], row["tools"], row["is_error"], row["timestamp"], row["line"]) for row in rows]


@ANY_STORE
def test_rows_read_straight_from_the_driver_are_what_sqlalchemy_reads(any_store):
    """store.driver_rows (ingest's reads of capture_files and sessions): every column's value as SQLAlchemy's own
    select gives it (SQLite's DateTime text as a datetime, PostgreSQL's float as a float), on SQLite and PostgreSQL;
    an IN list by store.marks, an ORDER BY after the condition."""
    table, when = CaptureFile.__table__, utcnow()
    with any_store.engine.begin() as conn:
        for n, path in enumerate(("/a", "/b", "/c")):
            insert_many(conn, table, [dict(path=path, agent="codex", session_id=f"s{n}", offset=n, size=10 * n,
                                           mtime=1.5 + n, lines=n, stored=n, quarantined=0, skipped=0, error=None,
                                           updated_at=when)])
        keys = tuple(c.name for c in table.columns)
        ours = driver_rows(conn, table, keys, f"path IN ({marks(2)}) ORDER BY path DESC", ["/a", "/c"])
        theirs = conn.execute(select(table).where(table.c.path.in_(["/a", "/c"])).order_by(table.c.path.desc())).all()
        none = driver_rows(conn, table, ("id",), "path = {}", ("/nowhere",))
    assert [tuple(r) for r in ours] == [tuple(r) for r in theirs] and [r.path for r in ours] == ["/c", "/a"]
    assert isinstance(ours[0].updated_at, datetime) and ours[0].mtime == 3.5 and none == []
