"""The number the product lives by: the real SmolLM2-135M-Instruct default before and after one SFT cycle on the
real-world fixture sessions (../shared/fixtures/real-world), measured on the frozen held-out split — held-out loss,
next-action agreement, tool-call validity, behavioural reward — printed as a table. Everything goes through the
product: capture import, dataset build, a queued SFT job in the engine, the evaluation worker, the gate.

    .venv/bin/python -m bench.bench_judge [--steps 8] [--max-contexts 32] [--fixtures DIR]"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real-world"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    parser.add_argument("--steps", type=int, default=8, help="SFT steps (batch 4; ~40 s each on 2 CPU cores)")
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--max-contexts", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NIGHTSCHOOL_HOME"] = str(Path(tmp) / "home")
        run(args)


def run(args) -> None:
    from app.cli.judge import metric_table
    from app.core.base.store import Store
    from app.core.capture.ingest import Ingestor
    from app.core.capture.scrub import Scrubber
    from app.core.capture.sources import CaptureConfig
    from app.core.datasets.catalog import Registry
    from app.core.datasets.config import BuildConfig, Filters
    from app.core.importer import import_paths
    from app.core.judge import promote as J
    from app.core.judge.report import EvalSettings
    from app.core.train.jobs import JobManager
    from app.core.train.spec import Hyper
    from app.core.workers import start_build

    store = Store()
    t0 = time.perf_counter()
    import_paths(Ingestor(store, CaptureConfig(roots={}), Scrubber()), [args.fixtures])
    outcome = start_build(store, BuildConfig(name="bench", max_length=args.max_length, val_share=0.0, test_share=0.3,
                                             filters=Filters(near_duplicate=0.0))).finish()
    if not outcome.ok:
        raise SystemExit(f"the dataset build failed: {outcome.message}")
    ds = Registry(store).get(outcome.name)
    print(f"dataset from {args.fixtures.name}: {ds.train} train / {ds.test} held-out examples "
          f"({time.perf_counter() - t0:.0f} s to import and build)")
    manager = JobManager(store)
    hyper = Hyper(max_steps=args.steps, epochs=100, batch_size=4, grad_accum=1, warmup=0.0, learning_rate=1e-3,
                  max_length=args.max_length, save_steps=1000)
    t1 = time.perf_counter()
    job = manager.submit(Path(ds.path) / "train.jsonl", hyper=hyper)
    try:
        job = manager.wait(job.id, timeout=7200)
    finally:  # an interrupted bench must not leave its engine training (engines outlive their clients by design)
        run = manager.latest_run(job.id)
        if run is not None and run.pid and manager.is_alive(run):
            os.kill(run.pid, 9)
    if job.state != "completed":
        raise SystemExit(f"training failed: {job.error}")
    print(f"one SFT cycle: {args.steps} LoRA steps in {time.perf_counter() - t1:.0f} s")
    settings = EvalSettings(max_contexts=args.max_contexts, max_new_tokens=args.max_new_tokens, samples=4)
    t2 = time.perf_counter()
    judged = J.judge(store, job.id, settings=settings)
    base, cand = judged.reports["base"], judged.reports["candidate"]
    print(f"evaluations (base + candidate, {cand.contexts} next actions, {cand.examples} examples, "
          f"{cand.tokens} assistant tokens): {time.perf_counter() - t2:.0f} s\n")
    print(metric_table([("base SmolLM2", base.metrics), ("after 1 cycle", cand.metrics)]))
    print("\noutcomes base:  " + ", ".join(f"{k} {v}" for k, v in sorted(base.outcomes.items())))
    print("outcomes cycle: " + ", ".join(f"{k} {v}" for k, v in sorted(cand.outcomes.items())))
    print(f"\ngate: {judged.verdict.summary()}")


if __name__ == "__main__":
    main()
