"""The share of stored tool calls (the teacher's decisions) that reach a train / val / test example when the
real-world fixture transcripts (../shared/fixtures/real-world and real-world-2) are imported and built with the
defaults (the embedded SmolLM2 tokenizer), one store per fixture set, and where the others were lost.

    .venv/bin/python -m bench.bench_coverage [--max-length 2048]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench.bench_datasets import ROOT, Phases, instrumented

FIXTURES = ROOT.parent / "shared" / "fixtures"
CORPORA = ("real-world", "real-world-2")


def stored_calls(store) -> dict[str, set[str]]:
    """Session id -> the ids of the tool calls stored on its main branch (what the teacher decided)."""
    from sqlalchemy import select

    from app.core.base.schema import MessageRow
    from app.core.capture.rows import parts_of

    out: dict[str, set[str]] = defaultdict(set)
    with store.session() as s:
        for row in s.scalars(select(MessageRow).where(MessageRow.branch == 0, MessageRow.role == "assistant")):
            for i, p in enumerate(q for q in parts_of(row) if q.kind == "tool_call"):
                out[row.session_id].add(p.call_id or f"call_{i}")
    return out


def coverage_of(folder: Path, renderer, max_length: int, tmp: Path) -> dict:
    """Import one fixture set into a fresh store, build it with the defaults, count the calls that reach examples."""
    from app.core.base.store import Store
    from app.core.capture.ingest import Ingestor
    from app.core.datasets.builder import build
    from app.core.datasets.config import BuildConfig
    from app.core.importer import import_paths

    store = Store(tmp / f"{folder.name}.db")
    try:
        import_paths(Ingestor(store), [folder])
        calls = stored_calls(store)
        phases, captured = Phases(), {}
        with instrumented(phases, renderer, captured):
            started = time.perf_counter()
            build(store, BuildConfig(base_model="default", max_length=max_length, name="coverage"), renderer,
                  tmp / f"built-{folder.name}", lambda *_: None)
            elapsed = time.perf_counter() - started
    finally:
        store.close()
    b = captured["b"]
    reached: dict[str, set[str]] = defaultdict(set)
    for e in b.examples:
        for m in e.messages:
            reached[e.session_id].update(c.get("id", "") for c in m.get("tool_calls") or [])
    total = sum(len(v) for v in calls.values())
    hit = sum(len(v & reached[sid]) for sid, v in calls.items())
    left_out = sum(len(v) for sid, v in calls.items() if sid not in b.conversations)
    return {"name": folder.name, "sessions": len(calls), "calls": total, "reached": hit,
            "in sessions the build left out": left_out, "lost in kept sessions": total - hit - left_out,
            "filters": {k: v for k, v in b.filters.items() if v}, "counts": dict(b.counts), "seconds": elapsed,
            "examples": len(b.examples)}


def coverage(max_length: int) -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["NIGHTSCHOOL_HOME"] = str(tmp / "home")
        from app.core.base import paths
        from engine import render

        renderer = render.load("default", paths.models_dir())
        print(f"tokenizer: {renderer.label} ({renderer.convention}); max_length {max_length}; build defaults")
        rows = [coverage_of(FIXTURES / name, renderer, max_length, tmp) for name in CORPORA
                if (FIXTURES / name).is_dir()]
        if not rows:
            sys.exit(f"no fixtures under {FIXTURES}")
        for r in rows + [{"name": "all", **{k: sum(x[k] for x in rows) for k in (
                "sessions", "calls", "reached", "in sessions the build left out", "lost in kept sessions",
                "examples", "seconds")}}]:
            print(f"\n{r['name']}: {r['reached']} of {r['calls']} stored tool calls reach an example "
                  f"({r['reached'] / max(1, r['calls']):.1%}); {r['sessions']} sessions, {r['examples']} examples, "
                  f"build {r['seconds']:.0f} s")
            print(f"  not reached: {r['in sessions the build left out']} in sessions the build left out (filters, "
                  f"near-duplicates), {r['lost in kept sessions']} in kept sessions (blocks dropped, tails cut, "
                  "windows excluded)")
            if "filters" in r:
                print("  removed: " + ", ".join(f"{k} {v}" for k, v in r["filters"].items()))
                print("  counts: " + ", ".join(f"{k} {v}" for k, v in r["counts"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description="Tool calls of the real-world fixtures that reach an example "
                                     "(default build).")
    parser.add_argument("--max-length", type=int, default=2048, help="the build's max_length")
    coverage(parser.parse_args().max_length)


if __name__ == "__main__":
    main()
