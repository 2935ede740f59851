"""Capture ingest throughput (MB/s) vs a plain json.loads line loop over the same files, as a ratio measured in the
same run (with the machine's load), on a generated Claude Code corpus and on the shared real-world fixtures repeated
to the same size; and the append-to-visible latency of the watcher.

    .venv/bin/python -m bench.bench_ingest [--mb 200] [--real-mb 200] [--appends 20] [--fixtures DIR ...]
        [--big-mb 200,1000,2000]  # also: one big generated file each, ingested in a fresh process: its peak RSS
        [--stages]              # also: where the ingest's time went (parse, scrub, rows and signals, writes)
        [--floors]              # also: what parsing (orjson, no objects) and the store's writes alone cost
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.claude_lines import big_file, session_lines

def generate(root: Path, megabytes: int, seed: int = 7) -> tuple[list[Path], int]:
    rng, files, total, n = random.Random(seed), [], 0, 0
    while total < megabytes * 1024**2:
        sid = f"{n:08x}-0000-4000-8000-{rng.getrandbits(48):012x}"
        path = root / f"-home-dev-work-project-{n % 12}" / f"{sid}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = "\n".join(session_lines(rng, sid, rng.randint(5, 40))) + "\n"
        path.write_text(data)
        files.append(path)
        total += len(data.encode())
        n += 1
    return files, total


FIXTURES = [Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / name
            for name in ("real-world", "real-world-2")]
UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def real_corpus(root: Path, megabytes: int, fixtures: list[Path]) -> tuple[list[Path], int]:
    """The fixtures' transcripts copied until `megabytes`; every uuid (in names and contents) is renamed per copy, so
    each copy is a new session rather than a copy of a stored one (which ingest would count as skipped)."""
    sources = [(base, f) for base in fixtures if base.is_dir() for f in sorted(base.rglob("*"))
               if f.is_file() and f.suffix in (".jsonl", ".json")]
    if not sources:
        raise SystemExit(f"no transcripts under {[str(f) for f in fixtures]}: pass --fixtures with the shared "
                         "real-world fixture folders (or --real-mb 0 to skip the real corpus)")
    files, total, copy = [], 0, 0
    while total < megabytes * 1024**2:
        rename = lambda m, c=copy: hashlib.md5(b"%d" % c + m[0]).hexdigest().encode()[:8] + m[0][8:]  # noqa: E731
        for base, source in sources:
            rel = str(source.relative_to(base.parent))
            target = root / f"copy-{copy}" / UUID.sub(rename, rel.encode()).decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(UUID.sub(rename, source.read_bytes()))
            files.append(target)
            total += target.stat().st_size
        copy += 1
    return files, total


def cpu() -> float:
    """CPU seconds of this process and its ended children (a scan's workers): on a loaded machine, steadier than wall."""
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + done.ru_utime + done.ru_stime


def plain_loop(files: list[Path]) -> tuple[float, float]:
    started, used = time.perf_counter(), cpu()
    for path in files:  # a .json document whole (older Gemini chats); JSONL line by line, a bad line passed over
        with path.open("rb") as fh:
            for line in [fh.read()] if path.suffix == ".json" else fh:
                try:
                    json.loads(line)
                except ValueError:
                    pass
    return time.perf_counter() - started, cpu() - used


def ours(files: list[Path], root: Path, db: Path, agent: str | None = "claude-code",
         workers: int | None = 1) -> tuple[float, int, float]:
    """Seconds (and CPU seconds, `cpu`) to ingest the files (agent None: each file's format detected, as a scan of
    mixed folders does) with `workers` prepare workers (1: all here; None: the app's default, from 16 MB read)."""
    from app.core.base.store import Store
    from app.core.capture.ingest import Ingestor
    from app.core.capture.sources import CaptureConfig

    store = Store(db)
    ingestor = Ingestor(store, CaptureConfig(roots={agent: [str(root)]} if agent else {}))
    ingestor.workers = workers or ingestor.workers
    started, used = time.perf_counter(), cpu()
    lines = sum(r.lines_in for r in ingestor.ingest_many(files, origin="scan", final=True) if r)
    elapsed, used = time.perf_counter() - started, cpu() - used
    store.close()
    return elapsed, lines, used


PEAK_CHILD = """
import json, os, resource, sys, time
from pathlib import Path
from app.core.base.store import Store
from app.core.capture.ingest import Ingestor
from app.core.capture.sources import CaptureConfig
from app.core.scrub.scrubber import Scrubber
path, db = Path(sys.argv[1]), Path(sys.argv[2])
scrubber = Scrubber()
scrubber.text("warm up: the rules are compiled before the baseline ~/x sk-ant-api03-" + "x" * 90)
ingestor = Ingestor(Store(db), CaptureConfig(roots={"claude-code": [str(path.parent)]}), scrubber)
status = Path("/proc/self/status")  # VmHWM: this process's own peak (Linux; ru_maxrss keeps the forking parent's
# peak across exec, so a child of a big test runner reported the runner's size)
hwm = lambda: int(next(l.split()[1] for l in status.read_text().splitlines() if l.startswith("VmHWM:")))
kib = hwm if status.exists() else lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
statm = Path("/proc/self/statm")  # the resident size now (Linux); elsewhere the peak so far stands in for it
now = lambda: int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024 if statm.exists() else kib()
base, started, cpu = now(), time.perf_counter(), time.process_time()
r = ingestor.ingest_many([path], origin="import", final=True)[0]
print(json.dumps(dict(base_kib=base, peak_kib=kib(), seconds=time.perf_counter() - started,
                      cpu=time.process_time() - cpu, status=r.status,
                      lines_in=r.lines_in, stored=r.stored, quarantined=r.quarantined, skipped=r.skipped,
                      balanced=r.balanced)))
"""


def peak_rss(path: Path, db: Path) -> dict:
    """Ingest one file in a fresh interpreter: its RSS before (KiB, after the imports and the store's opening) and
    its own peak (VmHWM; ru_maxrss elsewhere), time and counts."""
    done = subprocess.run([sys.executable, "-c", PEAK_CHILD, str(path), str(db)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], check=False)
    if done.returncode:
        raise SystemExit(f"the ingest of {path} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def big_files(tmp: Path, sizes: list[int]) -> None:
    """Peak RSS of ingesting one generated Claude Code file of each size (MB), each in a fresh process; the file and
    its store are deleted before the next (a 2 GB file needs ~4x its size free: the file, the store, the spill)."""
    for mb in sizes:
        free = shutil.disk_usage(tmp).free
        if free < 4 * mb * 1024**2:
            raise SystemExit(f"a {mb} MB file needs about {4 * mb} MB free in {tmp}, which has {free // 1024**2} MB: "
                             "free some space, or set TMPDIR to a folder on a bigger disk")
        path = tmp / "big" / f"{mb}mb" / "0b16f11e-0000-4000-8000-000000000001.jsonl"
        started = time.perf_counter()
        size = big_file(path, mb)
        made = time.perf_counter() - started
        db = tmp / f"big-{mb}.db"
        got = peak_rss(path, db)
        grown = (got["peak_kib"] - got["base_kib"]) / 1024
        print(f"one file of {size / 1024**2:.0f} MB (written in {made:.0f} s): peak RSS {got['peak_kib'] / 1024:.0f} "
              f"MiB (before the ingest {got['base_kib'] / 1024:.0f} MiB, grown {grown:.0f} MiB = "
              f"{grown / (size / 1024**2):.2f}x the file), {got['seconds']:.1f} s (CPU {got['cpu']:.1f} s), "
              f"{got['lines_in']} lines = {got['stored']} stored + {got['quarantined']} quarantined + "
              f"{got['skipped']} skipped ({'balanced' if got['balanced'] else 'NOT balanced'})   load average {load()}")
        shutil.rmtree(path.parent)
        for leftover in db.parent.glob(f"{db.name}*"):  # the store, its WAL and shared memory
            leftover.unlink()


def latency(tmp: Path, appends: int, lines_before: int) -> list[float]:
    """Seconds from an appended line's write to the watcher's on_ingest for it (file of lines_before lines)."""
    from app.core.base.store import Store
    from app.core.capture.ingest import Ingestor
    from app.core.capture.sources import CaptureConfig
    from app.core.capture.watcher import CaptureService

    root = tmp / f"watch-{lines_before}"
    path = root / "p" / "00000000-1111-4222-8333-444444444444.jsonl"
    path.parent.mkdir(parents=True)
    rng = random.Random(1)
    lines = []
    while len(lines) < lines_before + appends:
        lines += session_lines(rng, "00000000-1111-4222-8333-444444444444", 10)
    path.write_text("\n".join(lines[:lines_before]) + "\n")
    arrived = threading.Event()
    service = CaptureService(Ingestor(Store(tmp / f"lat-{lines_before}.db"),
                                      CaptureConfig(roots={"claude-code": [str(root)]})),
                             on_ingest=lambda _r: arrived.set())
    service.start()
    service.swept.wait(120)
    out = []
    for line in lines[lines_before:lines_before + appends]:
        arrived.clear()
        started = time.perf_counter()
        with path.open("a") as fh:
            fh.write(line + "\n")
        if arrived.wait(30):
            out.append(time.perf_counter() - started)
    service.stop()
    return out


def compare(label: str, files: list[Path], size: int, root: Path, db: Path, agent: str | None,
            by_stage: bool = False, by_floor: bool = False) -> None:
    """Plain loop, ours, plain loop again (the load moves: the ratio takes the faster plain run); by_stage: then
    where ours spent its time (`stages`)."""
    mb = size / 1024**2
    plain, plain_cpu = plain_loop(files)
    mine, lines, mine_cpu = ours(files, root, db, agent)
    from app.core.capture.pool import default_workers
    pooled, pooled_lines, pooled_cpu = ours(files, root, db.with_name(f"{db.stem}-pooled.db"), agent, workers=None)
    plain, plain_cpu = (min(pair) for pair in zip((plain, plain_cpu), plain_loop(files)))
    print(f"{label}: {len(files)} files, {mb:.0f} MB")
    print(f"  plain json.loads loop: {mb / plain:.1f} MB/s ({plain:.2f} s, CPU {plain_cpu:.2f} s)")
    print(f"  nightschool ingest (parse, scrub, signals, store), one process: {mb / mine:.1f} MB/s ({mine:.1f} s, "
          f"{lines} lines; CPU {mine_cpu:.1f} s)")
    print(f"  ratio ours / plain: {plain / mine:.2f} (CPU {plain_cpu / mine_cpu:.2f})   load average {load()}")
    print(f"  with {default_workers()} prepare workers (the app's default): {mb / pooled:.1f} MB/s ({pooled:.1f} s, "
          f"{pooled_lines} lines; CPU {pooled_cpu:.1f} s, the workers' included), ratio ours / plain "
          f"{plain / pooled:.2f} (CPU {plain_cpu / pooled_cpu:.2f}), {mine / pooled:.2f}x one process   load average "
          f"{load()}")
    if by_stage:
        stages(files, agent, mine)
    if by_floor:
        floors(files, db, mb, plain, mine)


def stages(files: list[Path], agent: str | None, took: float) -> None:
    """Where an ingest's time goes, without a profiler's distortion: each stage of every session run again alone
    (parse; scrub; the rows with signals, of which the parts' packing), the rest of `took` (the ingest's seconds)
    being the store's writes and the bookkeeping."""
    from app.core.capture import agents, rows
    from app.core.capture.detect import detect_format
    from app.core.capture.ingest import owner, real_path
    from app.core.capture.prepare import scrub
    from app.core.scrub.scrubber import Scrubber

    scrubber = Scrubber()
    scrubber.text("warm up: the rules are compiled before the timing ~/x sk-ant-api03-" + "x" * 90)
    spent = dict.fromkeys(("parse", "scrub", "rows and signals", "  of which the parts' packing"), 0.0)
    seen: set[Path] = set()
    for path in files:
        kind = agent or detect_format(real_path(path))
        main = owner(kind, real_path(path)) if kind in agents.AGENTS else None
        if main is None or main in seen:
            continue
        seen.add(main)
        started = time.perf_counter()
        session = agents.load(agents.AGENTS[kind].parser)(main, final=True)
        spent["parse"] += time.perf_counter() - started
        started = time.perf_counter()
        scrub(scrubber, session)
        spent["scrub"] += time.perf_counter() - started
        started = time.perf_counter()
        list(rows.session_records("s", session)[1])
        spent["rows and signals"] += time.perf_counter() - started
        started = time.perf_counter()
        for message in [*session.messages, *(m for branch in session.abandoned for m in branch)]:
            rows.pack_parts([rows._part(p) for p in message.parts])
        spent["  of which the parts' packing"] += time.perf_counter() - started
    spent["writes and the rest"] = took - sum(v for k, v in spent.items() if not k.startswith(" "))
    mb = sum(p.stat().st_size for p in files) / 1024**2
    for name, seconds in spent.items():
        print(f"    {name:30} {seconds:6.2f} s  {100 * seconds / took:5.1f} % of the ingest"
              + (f"  (alone {mb / seconds:.0f} MB/s)" if seconds > 0 else ""))


def floors(files: list[Path], db: Path, mb: float, plain: float, took: float) -> None:
    """What no ingest into this store can go below on this machine, each timed alone: every line parsed by orjson
    into plain values (no session model), and the rows the ingest stored (`db`) written again into an empty store of
    the same schema and pragmas, straight to the driver in one transaction. The rest of `took` is the Python work
    between them (the session model, scrubbing, signals, the rows, bookkeeping)."""
    import sqlite3

    import orjson

    from app.core.base.store import Store

    started = time.perf_counter()
    for path in files:
        data = path.read_bytes()
        for line in [data] if path.suffix == ".json" else data.split(b"\n"):
            try:
                orjson.loads(line)
            except orjson.JSONDecodeError:
                pass
    parse = time.perf_counter() - started
    source, target = sqlite3.connect(db), db.with_name(db.stem + "-floor.db")
    Store(target).close()  # the schema, by the migrations
    into = sqlite3.connect(target)
    for pragma in ("journal_mode=WAL", "foreign_keys=ON", "synchronous=NORMAL"):
        into.execute(f"PRAGMA {pragma}")
    tables = {t: [c[1] for c in source.execute(f"PRAGMA table_info({t})")] for t in ("sessions", "messages")}
    held = {t: source.execute(f"SELECT {', '.join(cols)} FROM {t}").fetchall() for t, cols in tables.items()}
    stored = sum(len(v) for rows_ in held.values() for row in rows_ for v in row if isinstance(v, (str, bytes)))
    started = time.perf_counter()
    for table, cols in tables.items():
        into.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                         held[table])
    into.commit()
    write = time.perf_counter() - started
    source.close()
    into.close()
    rest = took - parse - write
    print(f"    floor: orjson over every line     {parse:6.2f} s  ({mb / parse:.0f} MB/s)")
    print(f"    floor: the stored rows written   {write:6.2f} s  ({stored / 1024**2:.0f} MB of values, "
          f"{sum(map(len, held.values()))} rows)")
    print(f"    the two alone: {mb / (parse + write):.0f} MB/s, ratio {plain / (parse + write):.2f}; the rest of the "
          f"ingest (Python between them) {rest:.2f} s; at 0.5x it would have {2 * plain - parse - write:.2f} s")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f} on {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=200, help="synthetic corpus size (0: skip)")
    parser.add_argument("--real-mb", type=int, default=200, help="real fixtures repeated to this size (0: skip)")
    parser.add_argument("--fixtures", type=Path, nargs="*", default=FIXTURES)
    parser.add_argument("--appends", type=int, default=20)
    parser.add_argument("--stages", action="store_true", help="also where the ingest's time went, stage by stage")
    parser.add_argument("--floors", action="store_true", help="also what orjson and the store's writes alone cost")
    parser.add_argument("--big-mb", default="", help="one big file of each size (MB, comma-separated): peak RSS")
    args = parser.parse_args()
    print(f"load average at start: {load()}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.mb:
            root = tmp / "projects"
            files, size = generate(root, args.mb)
            compare("synthetic Claude Code corpus", files, size, root, tmp / "bench.db", "claude-code", args.stages,
                    args.floors)
            shutil.rmtree(root)
        if args.real_mb:
            root = tmp / "real"
            files, size = real_corpus(root, args.real_mb, args.fixtures)
            compare("real-world fixtures, repeated", files, size, root, tmp / "real.db", None, args.stages,
                    args.floors)
            shutil.rmtree(root)
        if args.big_mb:
            big_files(tmp, [int(x) for x in args.big_mb.split(",")])
        for before in (100, 5000):
            got = latency(tmp, args.appends, before)
            if got:
                print(f"append-to-visible, file of {before} lines: median {statistics.median(got) * 1000:.0f} ms, "
                      f"max {max(got) * 1000:.0f} ms over {len(got)} appends")
        print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
