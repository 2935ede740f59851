"""Capture ingest throughput (MB/s) on a generated Claude Code corpus vs a plain json.loads line loop, and the
append-to-visible latency of the watcher.

    .venv/bin/python -m bench.bench_ingest [--mb 200] [--appends 20]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

WORDS = ("the function returns a value when the test passes so we need to check imports in the module first then "
         "update config path error handler parser token stream fixture database migration").split()


def _prose(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _code(rng: random.Random, lines: int) -> str:
    return "\n".join(f"    {rng.choice(WORDS)}_{i} = {rng.choice(WORDS)}({rng.randint(0, 999)})  # {_prose(rng, 6)}"
                     for i in range(lines))


def session_lines(rng: random.Random, sid: str, turns: int) -> list[str]:
    """A realistic session: requests, split assistant lines (thinking + tool_use), tool results of varied size."""
    out, parent = [], None
    base = {"sessionId": sid, "cwd": "/home/dev/work/project-" + sid[:4], "gitBranch": "main", "version": "2.1.3",
            "userType": "external", "isSidechain": False}
    for t in range(turns):
        uid = f"{sid}-u{t}"
        out.append({**base, "type": "user", "uuid": uid, "parentUuid": parent, "timestamp": f"2026-11-{1 + t % 20:02d}T10:00:00.000Z",
                    "message": {"role": "user", "content": _prose(rng, rng.randint(8, 60))}})
        parent = uid
        for k in range(rng.randint(1, 4)):
            mid, call = f"msg_{sid}_{t}_{k}", f"toolu_{sid}_{t}_{k}"
            for j, block in enumerate(({"type": "thinking", "thinking": _prose(rng, rng.randint(20, 120))},
                                       {"type": "tool_use", "id": call, "name": rng.choice(["Read", "Bash", "Edit", "Grep"]),
                                        "input": {"file_path": f"/home/dev/work/src/{rng.choice(WORDS)}.py",
                                                  "command": _prose(rng, 5)}})):
                aid = f"{mid}-{j}"
                out.append({**base, "type": "assistant", "uuid": aid, "parentUuid": parent, "requestId": f"req_{mid}",
                            "timestamp": "2026-11-01T10:00:01.000Z",
                            "message": {"id": mid, "role": "assistant", "model": "claude-sonnet-4-5",
                                        "content": [block], "usage": {"input_tokens": 900, "output_tokens": 120}}})
                parent = aid
            rid = f"{sid}-r{t}-{k}"
            size = rng.choice([5, 20, 80, 400])
            out.append({**base, "type": "user", "uuid": rid, "parentUuid": parent, "timestamp": "2026-11-01T10:00:02.000Z",
                        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                                                                 "content": _code(rng, size), "is_error": rng.random() < 0.05}]}})
            parent = rid
        aid = f"{sid}-a{t}"
        out.append({**base, "type": "assistant", "uuid": aid, "parentUuid": parent, "timestamp": "2026-11-01T10:00:03.000Z",
                    "message": {"id": f"msg_{aid}", "role": "assistant", "model": "claude-sonnet-4-5",
                                "content": [{"type": "text", "text": _prose(rng, rng.randint(20, 80))}]}})
        parent = aid
    return [json.dumps(r) for r in out]


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


def plain_loop(files: list[Path]) -> float:
    started = time.perf_counter()
    for path in files:
        with path.open("rb") as fh:
            for line in fh:
                json.loads(line)
    return time.perf_counter() - started


def ours(files: list[Path], root: Path, db: Path) -> tuple[float, int]:
    from app.core.base.store import Store
    from app.core.capture.ingest import Ingestor
    from app.core.capture.sources import CaptureConfig

    store = Store(db)
    ingestor = Ingestor(store, CaptureConfig(roots={"claude-code": [str(root)]}))
    started = time.perf_counter()
    lines = sum(r.lines_in for r in ingestor.ingest_many(files, origin="scan", final=True) if r)
    elapsed = time.perf_counter() - started
    store.close()
    return elapsed, lines


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--appends", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        root = tmp / "projects"
        t = time.perf_counter()
        files, size = generate(root, args.mb)
        mb = size / 1024**2
        print(f"corpus: {len(files)} session files, {mb:.0f} MB (generated in {time.perf_counter() - t:.0f} s)")
        plain = plain_loop(files)
        mine, lines = ours(files, root, tmp / "bench.db")
        print(f"plain json.loads loop: {mb / plain:.1f} MB/s ({plain:.1f} s)")
        print(f"nightschool ingest (parse, scrub, signals, SQLite): {mb / mine:.1f} MB/s ({mine:.1f} s, {lines} lines)")
        print(f"ratio ours / plain: {plain / mine:.2f}")
        for before in (100, 5000):
            got = latency(tmp, args.appends, before)
            if got:
                print(f"append-to-visible, file of {before} lines: median {statistics.median(got) * 1000:.0f} ms, "
                      f"max {max(got) * 1000:.0f} ms over {len(got)} appends")


if __name__ == "__main__":
    main()
