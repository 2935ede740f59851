"""ingest_many writes many sessions per transaction and stores exactly what one ingest() per file stores: on the shared
real-world fixtures (several batches, copies, sub-agents, refusals), when a file vanishes mid-batch (it alone fails),
and when something else fails mid-batch (what was read before is stored, then the error is raised)."""
from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from app.core.base.schema import AgentSession, CaptureFile, ImportRow, MessageRow, QuarantineRow
from app.core.base.store import Store
from app.core.capture.ingest import Ingestor
from app.core.importer import expand
from app.core.scrub.scrubber import Scrubber
from tests.core.capture.helpers import REAL, assistant, text, user, write

REAL2 = REAL.parent / "real-world-2"


def snapshot(store: Store) -> dict[str, list]:
    """Every capture table's rows, without row ids and clocks (quarantine rows by their import's path)."""
    def rows(table, drop=("id", "updated_at", "created_at")):
        with store.engine.connect() as conn:
            return sorted((tuple((k, v) for k, v in r._mapping.items() if k not in drop)
                           for r in conn.execute(select(table.__table__))), key=repr)
    with store.engine.connect() as conn:
        paths = dict(conn.execute(select(ImportRow.id, ImportRow.path)).all())
        quarantine = sorted((paths[r.import_id], r.source_path, r.line, r.reason, r.excerpt)
                            for r in conn.execute(select(QuarantineRow.__table__)))
    return {"sessions": rows(AgentSession), "messages": rows(MessageRow), "imports": rows(ImportRow),
            "files": rows(CaptureFile), "quarantine": quarantine}


def ingestor_for(path: Path, config) -> Ingestor:
    return Ingestor(Store(path), config, Scrubber(home="/home/me"))


def per_file(files: list[Path], store_path: Path, config) -> Ingestor:
    ingestor = ingestor_for(store_path, config)
    for path in files:
        ingestor.ingest(path, origin="scan", final=True)
    return ingestor


def balanced(store: Store) -> None:
    with store.engine.connect() as conn:
        for r in conn.execute(select(CaptureFile.__table__)):
            assert r.lines == r.stored + r.quarantined + r.skipped, r.path
        for r in conn.execute(select(ImportRow.__table__)):
            assert r.lines_in == r.stored + r.quarantined + r.skipped, r.path


@pytest.mark.skipif(not REAL2.is_dir(), reason=f"shared fixtures not here ({REAL2})")
def test_batched_ingest_stores_what_one_ingest_per_file_stores_on_the_real_fixtures(tmp_path, config):
    files = expand([REAL, REAL2])
    alone = per_file(files, tmp_path / "alone.db", config)
    batched = ingestor_for(tmp_path / "batched.db", config)
    batched.batch_files, batched.batch_bytes = 9, 2 * 1024**2  # several batches, ended by count and by size
    seen: list[int] = []
    results = batched.ingest_many(files, origin="scan", final=True, progress=lambda i, n, _p: seen.append(i))
    assert seen == list(range(1, len(files) + 1))
    assert sum(r is not None and r.status == "ok" for r in results) > 40
    assert all(r.balanced for r in results if r is not None)
    got, want = snapshot(batched.store), snapshot(alone.store)
    assert {k: len(v) for k, v in got.items()} == {k: len(v) for k, v in want.items()}
    assert got == want
    balanced(batched.store)
    again = batched.ingest_many(files, origin="scan", final=True)  # nothing new: nothing read (refusals repeat)
    assert {r.status if r else None for r in again} <= {None, "refused"} and again.count(None) > 40


def session_files(root: Path, count: int) -> list[Path]:
    out = []
    for n in range(count):
        sid = f"{n:08x}-1111-4222-8333-444444444444"
        out.append(write(root / "-home-me-proj" / f"{sid}.jsonl", user("u0", None, f"task {n}", sessionId=sid),
                         assistant("a1", "u0", [text(f"done {n}")], sessionId=sid), "not json"))
    return out


def test_a_file_gone_before_its_batch_is_written_fails_alone(tmp_path, roots, config):
    files = session_files(roots["claude-code"], 4)
    keep = [f.read_bytes() for f in files]
    batched = ingestor_for(tmp_path / "batched.db", config)

    def vanish(index: int, _total: int, path: Path) -> None:
        if index == 2:  # read and prepared, not yet written: its batch's write fails on it
            path.unlink()
    results = batched.ingest_many(files, origin="scan", final=True, progress=vanish)
    assert [r.status for r in results] == ["ok", "error", "ok", "ok"]
    assert "could not read the file" in results[1].message
    others = [f for i, f in enumerate(files) if i != 1]
    alone = per_file(others, tmp_path / "alone.db", config)
    got, want = snapshot(batched.store), snapshot(alone.store)
    assert got["sessions"] == want["sessions"] and got["messages"] == want["messages"]
    assert got["files"] == want["files"]  # no row for the vanished file: a later look reads it again
    assert [(i[0], i[1]) for i in got["quarantine"] if i[2] is None] == [(str(files[1]), str(files[1]))]
    assert sum(q[2] == 3 for q in got["quarantine"]) == 3  # each stored file's bad line, once
    balanced(batched.store)
    files[1].write_bytes(keep[1])  # back: the next scan stores it
    again = batched.ingest_many(files, origin="scan", final=True)
    assert [r and r.status for r in again] == [None, "ok", None, None] and again[1].stored == 2


def test_an_error_mid_batch_stores_what_was_read_before_it_then_is_raised(tmp_path, roots, config):
    files = session_files(roots["claude-code"], 5)
    batched = ingestor_for(tmp_path / "batched.db", config)

    def stop(index: int, _total: int, _path: Path) -> None:
        if index == 3:
            raise RuntimeError("the window closed")
    with pytest.raises(RuntimeError, match="window closed"):
        batched.ingest_many(files, origin="scan", final=True, progress=stop)
    want = snapshot(per_file(files[:3], tmp_path / "alone.db", config).store)
    got = snapshot(batched.store)
    assert got["sessions"] == want["sessions"] and got["files"] == want["files"] and len(got["sessions"]) == 3
    results = batched.ingest_many(files, origin="scan", final=True)  # the rest on the next scan
    assert [r and r.status for r in results] == [None, None, None, "ok", "ok"]
    balanced(batched.store)
