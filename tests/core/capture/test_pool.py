"""Prepare workers: every real fixture (and a copy of a named session in another folder) ingested by a scan whose
files are prepared in worker processes gives the same stored rows, results, counts and scrub report as one process;
a worker's unreadable file fails as it would here; a worker that dies leaves its file to this process."""
from __future__ import annotations

import os
import shutil
import signal
import sqlite3
from pathlib import Path

import pytest

from app.core.base.store import Store
from app.core.capture import ingest as ingest_module, pool as pool_module, rows
from app.core.capture.ingest import Ingestor, session_key
from tests.core.capture.helpers import REAL

REAL2 = REAL.parent / "real-world-2"
DATED = {"updated_at", "created_at"}  # when it was written, not what


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json")
                  and p.name != "MANIFEST.json")


def _corpus(tmp_path: Path) -> list[Path]:
    files = _files(REAL) + _files(REAL2)
    named = next(f for f in files if f.suffix == ".jsonl" and (f.parent / f.stem / "subagents").is_dir())
    copy = tmp_path / "elsewhere" / named.name  # a copy: stored as the same session (a rekeyed worker row)
    shutil.copytree(named.parent / named.stem, copy.parent / named.stem)
    shutil.copy(named, copy)
    return files + _files(copy.parent)


def _dump(db: Path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(db)
    out = {}
    for table in ("sessions", "messages", "capture_files", "imports", "quarantine"):
        columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})") if r[1] not in DATED | {"id"}]
        out[table] = sorted(conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall(), key=repr)
    conn.close()
    return out


def _scan(db: Path, files: list[Path], workers: int, monkeypatch) -> tuple[list, dict, dict, int]:
    sent, submit = [], pool_module.PreparePool.submit
    monkeypatch.setattr(pool_module.PreparePool, "submit", lambda pool, *a: sent.append(a) or submit(pool, *a))
    ingestor = Ingestor(Store(db))
    ingestor.workers, ingestor.parallel_bytes, ingestor.batch_bytes = workers, 0, 2 * 1024**2  # several batches
    results = ingestor.ingest_many(files, final=True)
    shown = [None if r is None else (r.path, r.status, r.lines_in, r.stored, r.quarantined, r.skipped, r.sessions)
             for r in results]
    return shown, _dump(db), dict(ingestor.scrubber.report.counts), len(sent)


@pytest.mark.skipif(not (REAL2 / "MANIFEST.json").is_file() and not (REAL2 / "MANIFEST.tsv").is_file(),
                    reason=f"shared fixtures not here ({REAL2})")
def test_a_scan_prepared_by_workers_stores_what_one_process_stores(tmp_path, monkeypatch):
    files = _corpus(tmp_path)
    alone = _scan(tmp_path / "alone.db", files, 1, monkeypatch)
    pooled = _scan(tmp_path / "pooled.db", files, 2, monkeypatch)
    assert len(files) > 60 and len(alone[1]["messages"]) > 5000 and sum(alone[2].values()) > 0
    assert alone[3] == 0 and pooled[3] > 50  # the workers prepared nearly every file
    copies = [r for f, r in zip(files, pooled[0]) if "elsewhere" in str(f) and r and r[-1]]
    assert copies and copies[0][-1][0] != session_key("claude-code", Path(copies[0][0])) and any(r and r[-1] == copies[0][-1] and r is not copies[0]
                                                  for r in pooled[0])  # a copy: stored under its original's id
    assert pooled[0] == alone[0]
    for table in alone[1]:
        assert pooled[1][table] == alone[1][table], table
    assert pooled[2] == alone[2]


def test_rows_made_for_a_guessed_id_move_to_the_stored_one():
    from app.core.capture.session import Message, Part, Session
    sub = Session("claude-code", "sub-1", "/x/sub.jsonl", messages=[Message("user", [Part("text", text="hi")])])
    top = Session("claude-code", "top", "/x/top.jsonl", messages=[Message("user", [Part("text", text="go")])],
                  subagents=[sub])
    def made(sid: str) -> tuple[list[dict], list[tuple]]:  # as a worker sends them: message rows as tuples
        sessions, messages = rows.session_records(sid, top)
        return sessions, list(messages)

    guessed = made("guess")
    for s in guessed[0]:
        s.pop("updated_at")
    sessions, moved = rows.rekey(*made("guess"), "guess", "stored")
    messages, want = list(moved), made("stored")
    for s in (*sessions, *want[0]):
        s.pop("updated_at")
    assert (sessions, messages) == want and sessions != guessed[0]
    assert {m[0] for m in messages} == {s["id"] for s in want[0]} and "guess" not in {m[0] for m in messages}


def test_a_file_a_worker_cannot_read_fails_as_here(tmp_path, monkeypatch):
    good = tmp_path / "a" / "good.jsonl"
    good.parent.mkdir()
    shutil.copy(_files(REAL)[0], good)
    gone = tmp_path / "a" / "gone.jsonl"
    shutil.copy(good, gone)
    ingestor = Ingestor(Store(tmp_path / "s.db"))
    ingestor.workers, ingestor.parallel_bytes = 2, 0
    real_send = ingestor._send

    def send_then_delete(pool, plan):  # planned (it existed), then gone before the worker reads it
        if plan[0] == gone:
            gone.unlink()
        return real_send(pool, plan)

    monkeypatch.setattr(ingestor, "_send", send_then_delete)
    results = ingestor.ingest_many([good, gone], final=True)
    assert results[0].status == "ok" and results[0].stored > 0
    assert results[1].status == "error" and "could not read the file" in results[1].message


def test_a_worker_that_dies_leaves_its_files_to_this_process(tmp_path, monkeypatch):
    files = [tmp_path / f"s{i}.jsonl" for i in range(3)]
    for f in files:
        shutil.copy(_files(REAL)[0], f)
    ingestor = Ingestor(Store(tmp_path / "s.db"))
    ingestor.workers, ingestor.parallel_bytes = 2, 0
    monkeypatch.setattr(pool_module, "_prepare", _die)  # every worker dies on its first file (a stand-in for a kill)
    here, prepare_here = [], ingestor._prepare
    monkeypatch.setattr(ingestor, "_prepare", lambda path, *a: here.append(path) or prepare_here(path, *a))
    results = ingestor.ingest_many(files, final=True)
    assert here == files
    assert [r.status for r in results] == ["ok"] * 3 and all(r.stored > 0 for r in results)


def _die(*_args):
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_file_stored_meanwhile_by_another_ingest_is_not_written_again(tmp_path, monkeypatch):
    files = [tmp_path / f"s{i}.jsonl" for i in range(2)]
    for f in files:
        shutil.copy(_files(REAL)[0], f)
    store = Store(tmp_path / "s.db")
    ingestor, watcher = Ingestor(store), Ingestor(store)
    ingestor.workers, ingestor.parallel_bytes = 2, 0
    real_send, theirs = ingestor._send, []

    def send_then_the_watcher_stores_it(pool, plan):
        sent = real_send(pool, plan)
        if plan[0] == files[0]:  # sent to a worker, then stored by another ingest before this one writes it
            theirs.append(watcher.ingest(files[0], final=True))
        return sent

    monkeypatch.setattr(ingestor, "_send", send_then_the_watcher_stores_it)
    results = ingestor.ingest_many(files, final=True)
    assert theirs[0].status == "ok" and results[0] is None and results[1].status == "ok"
    conn = sqlite3.connect(tmp_path / "s.db")
    imports = conn.execute("SELECT count(*) FROM imports").fetchone()[0]
    held = conn.execute("SELECT count(*) FROM messages m JOIN sessions s ON s.id = m.session_id "
                        "WHERE s.id = ?", (theirs[0].sessions[0],)).fetchone()[0]
    alone = Ingestor(Store(tmp_path / "alone.db")).ingest(files[0], final=True)
    assert imports == 2 and held == len(_dump(tmp_path / "alone.db")["messages"])  # their copy stands, once
    assert alone.stored == theirs[0].stored


KILLED_SCAN = """
import sys
from pathlib import Path
from app.core.capture.pool import PreparePool
from app.core.capture.sources import CaptureConfig
if __name__ == "__main__":
    pool = PreparePool(2, CaptureConfig(), "/nonexistent-home")
    pool.submit(Path(sys.argv[1]), "claude-code", True, "k").result()
    print(" ".join(str(pid) for pid in pool._pool._processes), flush=True)
    sys.stdin.read()  # killed here, mid-scan
"""


def test_workers_end_when_the_scan_is_killed(tmp_path):
    import subprocess
    import sys
    import time
    script = tmp_path / "scan.py"
    script.write_text(KILLED_SCAN)
    proc = subprocess.Popen([sys.executable, str(script), str(_files(REAL)[0])], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[3])
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert pids and all(_alive(p) for p in pids)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 60
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split(") ")[-1].startswith("Z"))  # a zombie has ended


def test_the_capture_settings_name_the_workers(tmp_path, monkeypatch):
    from app.core.capture.sources import CaptureConfig
    files = [tmp_path / f"s{i}.jsonl" for i in range(3)]
    for f in files:
        shutil.copy(_files(REAL)[0], f)
    assert Ingestor(Store(tmp_path / "d.db")).workers == pool_module.default_workers() >= 1
    saved = CaptureConfig(workers=1).save(tmp_path / "capture.json")
    ingestor = Ingestor(Store(tmp_path / "s.db"), CaptureConfig.load(saved))
    ingestor.parallel_bytes = 0
    monkeypatch.setattr(ingest_module, "PreparePool", None)  # one process: no pool is ever made
    assert [r.status for r in ingestor.ingest_many(files, final=True)] == ["ok"] * 3
    with pytest.raises(ValueError):
        CaptureConfig.model_validate({"workers": -1})


def test_a_workers_rows_moved_once_move_again_when_the_batch_is_written_file_by_file(tmp_path):
    from app.core.capture.prepare import prepare
    from app.core.capture.sources import CaptureConfig
    from app.core.scrub.scrubber import Scrubber
    main = _named(tmp_path)
    ready = prepare(main, "claude-code", True, CaptureConfig(), Scrubber()).with_rows("guess")
    first = ready.rows_for("stored")
    first = (first[0], list(first[1]))
    again = ready.rows_for("stored")  # a failed batch transaction: each file written alone, the rows again
    assert len(first[0]) > 1 and (again[0], list(again[1])) == first
    assert {s["id"] for s in first[0]} & {s["parent_id"] for s in first[0]} == {"stored"}


def test_a_session_stored_meanwhile_through_its_sub_agent_file_is_not_written_again(tmp_path, monkeypatch):
    main = _named(tmp_path)
    sub = next((main.parent / main.stem / "subagents").glob("agent-*.jsonl"))
    store = Store(tmp_path / "s.db")
    ingestor, watcher = Ingestor(store), Ingestor(store)
    ingestor.workers, ingestor.parallel_bytes = 2, 0
    real_send, theirs = ingestor._send, []

    def send_then_the_sub_agent_grows(pool, plan):  # the worker reads the session before the line lands
        sent = real_send(pool, plan)
        sent.future.result()
        with sub.open("a", encoding="utf-8") as fh:
            fh.write(sub.read_text(encoding="utf-8").splitlines()[-1] + "\n")  # a duplicate: counted, skipped
        theirs.append(watcher.ingest(sub, final=True))  # the watcher stores the session again (main unchanged)
        return sent

    monkeypatch.setattr(ingestor, "_send", send_then_the_sub_agent_grows)
    assert ingestor.ingest_many([main], final=True) == [None] and theirs[0].status == "ok"
    conn = sqlite3.connect(tmp_path / "s.db")
    lines = conn.execute("SELECT lines FROM capture_files WHERE path = ?", (str(sub),)).fetchone()[0]
    assert lines == len(sub.read_text(encoding="utf-8").splitlines())  # the watcher's fuller count stands
    assert conn.execute("SELECT count(*) FROM imports").fetchone()[0] == 1


def test_a_scan_whose_workers_cannot_start_goes_on_in_its_own_process(tmp_path, monkeypatch):
    files = [tmp_path / f"s{i}.jsonl" for i in range(3)]
    for f in files:
        shutil.copy(_files(REAL)[0], f)
    closed = []

    class NoProcesses(pool_module.PreparePool):
        def warm(self):
            raise OSError(24, "Too many open files")

        def close(self):
            closed.append(True)
            super().close()

    monkeypatch.setattr(ingest_module, "PreparePool", NoProcesses)
    ingestor = Ingestor(Store(tmp_path / "s.db"))
    ingestor.workers, ingestor.parallel_bytes = 2, 0
    assert [r.status for r in ingestor.ingest_many(files, final=True)] == ["ok"] * 3 and closed == [True]


def _named(tmp_path: Path) -> Path:
    """A copy of a real Claude Code session named by its id, with its sub-agents' files."""
    named = next(f for f in _files(REAL) + _files(REAL2)
                 if f.suffix == ".jsonl" and (f.parent / f.stem / "subagents").is_dir())
    main = tmp_path / "projects" / named.name
    shutil.copytree(named.parent / named.stem, main.parent / named.stem)
    shutil.copy(named, main)
    return main


def test_a_batch_counts_a_sessions_sub_agent_files_towards_its_bytes(tmp_path, monkeypatch):
    mains = [_named(tmp_path / name) for name in ("a", "b")]
    subs = sum(f.stat().st_size for f in (mains[0].parent / mains[0].stem / "subagents").glob("*.jsonl"))
    ingestor = Ingestor(Store(tmp_path / "s.db"))
    ingestor.workers, ingestor.batch_bytes = 1, mains[0].stat().st_size + subs // 2  # one main fits, not its subs
    written, write = [], ingestor._write_batch
    monkeypatch.setattr(ingestor, "_write_batch", lambda pending, *a: written.append(len(pending)) or write(pending, *a))
    assert [r.status for r in ingestor.ingest_many(mains, final=True)] == ["ok", "ok"]
    assert subs > 0 and written == [1, 1]  # a batch of one session each (counting the main files only: one of two)


def test_a_worker_takes_the_rules_compiled_here_and_loads_no_store(tmp_path):
    """Sent the scrubber's rules as this process compiled them (scrubber.use_rules), a worker neither imports
    detect-secrets nor compiles anything, and preparing a file needs no SQLAlchemy: it starts in a fraction of what
    it took."""
    from app.core.capture.sources import CaptureConfig

    file = tmp_path / "s.jsonl"
    shutil.copy(_files(REAL)[0], file)
    pool = pool_module.PreparePool(2, CaptureConfig(), "/nonexistent-home").warm()
    try:
        ready, _replaced = pool.submit(file, "claude-code", True, "k").result()
        loaded = pool._pool.submit(eval, "sorted(__import__('sys').modules.keys() & "
                                         "{'sqlalchemy', 'alembic', 'detect_secrets'})").result()
    finally:
        pool.close()
    assert ready.records and ready.records[1] and loaded == []
