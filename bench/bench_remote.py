"""Remote-training overhead: the same tiny SFT job run locally and submitted to a Ray cluster (a real local head this
script starts: loopback, 1 CPU), interleaved; wall to the first optimizer step and wall total, and their ratios.

    .venv/bin/python -m bench.bench_remote [--repeats 2] [--steps 20] [--address http://HEAD:8265 --storage DIR]"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def one_job(manager, chat: Path, model: str, steps: int, backend: str) -> tuple[float, float]:
    """(seconds from submit to the first train step's event in events.jsonl, seconds from submit to finalised)."""
    from app.core.train.events import read_events
    from tests.conftest import fast_hyper

    started = time.monotonic()
    job = manager.submit(chat, model=model, hyper=fast_hyper(max_steps=steps, save_steps=steps), backend=backend)
    run = manager.latest_run(job.id)
    events_path = Path(run.run_dir) / "events.jsonl"
    first = None
    while manager.is_alive(run):
        if first is None and any(e.type == "metrics" for e in read_events(events_path)):
            first = time.monotonic() - started
        time.sleep(0.05)
    done = manager.finalise(job.id)
    total = time.monotonic() - started
    if first is None and any(e.type == "metrics" for e in read_events(events_path)):
        first = total
    assert done.state == "completed", f"{backend} job {job.id}: {done.state} {done.error}"
    return first, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--address", default="", help="an existing cluster (default: start a local head)")
    parser.add_argument("--storage", default="", help="with --address: a checkpoint folder both sides reach")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ns-bench-remote-"))
    os.environ["NIGHTSCHOOL_HOME"] = str(tmp / "home")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    head_tmp, started_head = Path(f"/tmp/ns-bench-ray-{os.getpid()}"), False
    try:
        from app.core.base import settings
        from app.core.base.store import Store
        from app.core.train.backends import ray as rb
        from app.core.train.jobs import JobManager
        from tests import ray_head
        from tests.conftest import write_jsonl
        from tests.tiny_model import build, chat_records

        model = str(build(tmp / "tiny"))
        chat = write_jsonl(tmp / "chat.jsonl", chat_records(24))
        t0 = time.monotonic()
        started_head = not args.address
        address = args.address or ray_head.start(head_tmp)
        print(f"Ray head: {address} (started in {time.monotonic() - t0:.1f} s, not counted)")
        storage = args.storage or str(tmp / "storage")
        Path(storage).mkdir(parents=True, exist_ok=True)
        store = Store()
        settings.put(store, rb.ADDRESS, address)
        settings.put(store, rb.STORAGE, storage)
        manager = JobManager(store)
        rows: dict[str, list[tuple[float, float]]] = {"local": [], "ray": []}
        for i in range(args.repeats):
            for backend in ("local", "ray"):
                first, total = one_job(manager, chat, model, args.steps, backend)
                rows[backend].append((first, total))
                print(f"  #{i + 1} {backend:5} first step {first:6.1f} s   total {total:6.1f} s")
        med = {b: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for b, v in rows.items()}
        print(f"\n{args.steps} steps, tiny model, median of {args.repeats}:")
        print(f"  local: first step {med['local'][0]:.1f} s, total {med['local'][1]:.1f} s")
        print(f"  ray:   first step {med['ray'][0]:.1f} s, total {med['ray'][1]:.1f} s")
        print(f"  ratio ray/local: first step {med['ray'][0] / med['local'][0]:.2f}x, "
              f"total {med['ray'][1] / med['local'][1]:.2f}x")
    finally:
        if started_head:
            ray_head.stop(head_tmp)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
