"""The store's size per MB of transcripts (bench/README.md "Space"): the real-world fixtures and the bench_ingest
generator imported into a fresh SQLite store; its file (WAL checkpointed), the messages table per `dbstat`, the
parts' bytes, the import's time and the load of every message's parts (what a build's load does per row).

    .venv/bin/python bench/bench_space.py [--mb 200] [--fixtures DIR ...] [--keep DIR] [--upgrade STORE.db ...]
    .venv/bin/python bench/bench_space.py --code /tmp/main-export   # the same figures with another checkout's code

`--keep` leaves the stores there (a store of an older migration, to time its upgrade with `--upgrade`: a copy is
opened, i.e. migrated, and its file measured before and after VACUUM).
"""
from __future__ import annotations

import argparse
import inspect
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("NIGHTSCHOOL_SHARED", ROOT.parent / "shared"))
MB = 1024**2


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f} on {os.cpu_count()} cores"


def sizes(db: Path) -> dict:
    """The file after a WAL checkpoint; the messages table and its indexes (dbstat); the parts' and text's bytes."""
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out = {"file": db.stat().st_size, "free": con.execute("PRAGMA freelist_count").fetchone()[0]
           * con.execute("PRAGMA page_size").fetchone()[0]}
    indexes = [r[0] for r in con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages'")]
    per = dict(con.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall())
    out["messages"], out["messages_indexes"] = per.get("messages", 0), sum(per.get(i, 0) for i in indexes)
    columns = [r[1] for r in con.execute("PRAGMA table_info(messages)")]
    for column in ("parts_json", "parts_z", "text"):  # bytes, not characters
        out[column] = con.execute(f"SELECT COALESCE(SUM(LENGTH(CAST({column} AS BLOB))), 0) FROM messages"
                                  ).fetchone()[0] if column in columns else 0
    out["rows"] = con.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    out["sessions"] = con.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
    con.close()
    return out


def parts_load(store, repeat: int = 3) -> tuple[float, float, int]:
    """Seconds to fetch every message row (ORM) and to turn each one's parts into Parts (best of `repeat`)."""
    from sqlalchemy import select

    from app.core.base.schema import MessageRow
    from app.core.capture.rows import parts_of

    by_row = "row" in inspect.signature(parts_of).parameters  # this checkout's reader takes the row; before, the text
    fetch = parse = float("inf")
    count = 0
    for _ in range(repeat):
        started = time.perf_counter()
        with store.session() as s:
            rows = s.scalars(select(MessageRow).order_by(MessageRow.id)).all()
            fetched = time.perf_counter()
            count = sum(len(parts_of(r) if by_row else parts_of(r.parts_json)) for r in rows)
            done = time.perf_counter()
        fetch, parse = min(fetch, fetched - started), min(parse, done - fetched)
    return fetch, parse, count


def levels(store) -> None:
    """What the store writes (an LZ4 block per row) and zlib per row at levels 1, 6 and 9 on this store's parts:
    bytes and time both ways; and zlib level 1 kept only where smaller."""
    import zlib

    import lz4.block
    from sqlalchemy import select

    from app.core.base.schema import MessageRow
    from app.core.capture.rows import parts_text

    with store.session() as s:
        texts = [parts_text(r).encode() for r in s.scalars(select(MessageRow))]
    plain = sum(map(len, texts))

    def timed(compress, decompress) -> tuple[list[bytes], float, float]:
        started = time.perf_counter()
        packed = [compress(t) for t in texts]
        took = time.perf_counter() - started
        started = time.perf_counter()
        for p in packed:
            decompress(p)
        return packed, took, time.perf_counter() - started

    packed, took, back = timed(lambda t: lz4.block.compress(t, store_size=True), lz4.block.decompress)
    print(f"  lz4 (stored): {sum(map(len, packed)) / MB:.2f} MB of {plain / MB:.2f} "
          f"({sum(map(len, packed)) / plain:.3f}) in {took:.2f} s, decompressed in {back:.2f} s")
    for level in (1, 6, 9):
        packed, took, back = timed(lambda t, level=level: zlib.compress(t, level), zlib.decompress)
        print(f"  zlib-{level}: {sum(map(len, packed)) / MB:.2f} MB of {plain / MB:.2f} "
              f"({sum(map(len, packed)) / plain:.3f}) in {took:.2f} s, decompressed in {back:.2f} s" + (
                  f"; kept only where smaller: {sum(min(len(p), len(t)) for p, t in zip(packed, texts)) / MB:.2f} MB, "
                  f"{sum(len(p) >= len(t) for p, t in zip(packed, texts))} of {len(texts)} rows not smaller"
                  if level == 1 else ""))


def corpus(label: str, files: list[Path], folder: Path, db: Path) -> None:
    from app.core.base.store import Store
    from app.core.capture import rows
    from app.core.capture.ingest import Ingestor
    from app.core.importer import import_paths

    size = sum(f.stat().st_size for f in files)
    store = Store(db)
    started = time.perf_counter()
    report = import_paths(Ingestor(store), [folder])
    took = time.perf_counter() - started
    fetch, parse, parts = parts_load(store)
    store.close()
    got = sizes(db)
    print(f"{label}: {len(files)} files, {size / MB:.1f} MB of transcripts, {got['sessions']} sessions, "
          f"{got['rows']} message rows ({len(report.refused())} files refused)")
    print(f"  import {took:.1f} s ({size / MB / took:.1f} MB/s)")
    print(f"  store {got['file'] / MB:.1f} MB ({got['free'] / MB:.1f} MB free pages) = {got['file'] / size:.2f} "
          f"per MB of transcripts; messages {got['messages'] / MB:.1f} (+{got['messages_indexes'] / MB:.1f}) MB "
          f"= {(got['messages'] + got['messages_indexes']) / got['file']:.0%}")
    print(f"  parts_json {got['parts_json'] / MB:.1f} MB, parts_z {got['parts_z'] / MB:.1f} MB, "
          f"text {got['text'] / MB:.1f} MB")
    print(f"  load of every row's parts: fetch {fetch:.2f} s + parts {parse:.2f} s ({parts} parts), best of 3")
    if hasattr(rows, "parts_text"):  # this checkout's codec
        store = Store(db)
        levels(store)
        store.close()
    print(f"  load average {load()}")


def upgrade(old: Path, tmp: Path) -> None:
    """Open a copy of a store from an older migration (the upgrade runs on open); its file before and after, and
    after VACUUM."""
    from app.core.base.store import Store

    copy = tmp / f"upgrade-{old.name}"
    shutil.copy(old, copy)
    before = sizes(copy)
    started = time.perf_counter()
    Store(copy).close()
    took = time.perf_counter() - started
    after = sizes(copy)
    con = sqlite3.connect(copy)
    started = time.perf_counter()
    con.execute("VACUUM")
    vacuum = time.perf_counter() - started
    con.close()
    print(f"upgrade of {old} ({before['rows']} message rows): {took:.1f} s; file {before['file'] / MB:.1f} -> "
          f"{after['file'] / MB:.1f} MB ({after['free'] / MB:.1f} MB free pages), after VACUUM "
          f"{copy.stat().st_size / MB:.1f} MB ({vacuum:.1f} s); parts_json {after['parts_json'] / MB:.1f} MB, "
          f"parts_z {after['parts_z'] / MB:.1f} MB; load average {load()}")
    copy.unlink()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=200, help="bench_ingest's generated corpus (0: skip)")
    parser.add_argument("--fixtures", type=Path, nargs="*",
                        default=[SHARED / "fixtures" / "real-world", SHARED / "fixtures" / "real-world-2"])
    parser.add_argument("--keep", type=Path, help="leave the stores in this folder")
    parser.add_argument("--upgrade", type=Path, nargs="*", default=[], help="stores of an older migration to upgrade")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose app/ is measured")
    args = parser.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    import app.core.base.store

    print(f"code {Path(app.core.base.store.__file__).parents[3]}; load average at start: {load()}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["NIGHTSCHOOL_HOME"] = str(tmp / "home")
        os.environ.pop("NIGHTSCHOOL_DATABASE_URL", None)
        keep = args.keep or tmp
        keep.mkdir(parents=True, exist_ok=True)
        for old in args.upgrade:
            upgrade(old, tmp)
        if args.fixtures:
            real = tmp / "real"
            for base in args.fixtures:
                shutil.copytree(base, real / base.name)
            files = [f for f in real.rglob("*") if f.is_file() and f.suffix in (".jsonl", ".json")]
            corpus("real-world fixtures", files, real, keep / "real.db")
        if args.mb:
            from bench.bench_ingest import generate

            synth = tmp / "projects"
            files, _ = generate(synth, args.mb)
            corpus(f"bench_ingest generator ({args.mb} MB)", files, synth, keep / "synthetic.db")
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
