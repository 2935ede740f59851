"""Dataset build throughput on generated agent sessions vs a plain convert + apply_chat_template loop; tokens per
example; padding saved by packing.

    .venv/bin/python -m bench.bench_datasets [--sessions 10000] [--quick] [--max-length 2048] [--profile]
    .venv/bin/python bench/bench_datasets.py --quick

(The share of the teacher's decisions that reach an example, on the real-world fixtures: bench/bench_coverage.py.)

Sessions are generated as `capture.model.Session` objects (Claude Code shape: thinking, text and tool calls in one
assistant message, tool results in a `tool` message) and stored through `capture.rows.session_rows`, so the rows,
parts JSON, signals, outcome and tool-call counts are exactly what capture writes. The build runs in-process with the
real tokenizer (SmolLM2-135M-Instruct, or a small BPE tokenizer built on the spot when that folder is missing).
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import random
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/bench_datasets.py` as well as `python -m bench.bench_datasets`
    sys.path.insert(0, str(ROOT))

from bench.synthetic_sessions import populate  # noqa: E402

SMOLLM2 = Path.home() / ".local/share/nightschool/models/smollm2-135m-instruct"

# --- timing -------------------------------------------------------------------------------------------------------
class Phases:
    """Exclusive wall time per phase: a phase running inside another pauses the outer one's clock."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.calls: Counter = Counter()
        self.stack: list[list] = []  # [name, started]

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            now = time.perf_counter()
            if self.stack:
                outer = self.stack[-1]
                self.total[outer[0]] += now - outer[1]
            self.stack.append([name, now])
            try:
                return fn(*args, **kwargs)
            finally:
                end = time.perf_counter()
                self.total[name] += end - self.stack.pop()[1]
                self.calls[name] += 1
                if self.stack:
                    self.stack[-1][1] = end
        return timed


def instrumented(phases: Phases, renderer, captured: dict):
    """Patches (undone on exit) that time the builder's phases without editing it; `captured['b']` gets the Build."""
    from app.core.datasets import builder, checks, dedup, filters, manifest, windows

    def keep(write: Callable) -> Callable:
        def inner(out, config, mode, r, b, *rest):
            captured["b"] = b
            return write(out, config, mode, r, b, *rest)
        return inner

    stack = contextlib.ExitStack()
    for target, attr, name in ((builder, "load_conversations", "load (SQL + ORM)"), (filters, "apply", "filters"),
                               (builder, "conversation", "convert (rows -> messages)"),
                               (dedup, "near_duplicates", "dedup (MinHash)"), (builder, "_split_sessions", "splits"),
                               (windows, "windows", "windows (token counts)"), (checks, "standard", "checks"),
                               (manifest, "example_id", "example ids"), (builder, "_overlap", "overlap check"),
                               (builder, "_write", "write (JSONL + manifest)")):
        fn = getattr(target, attr)
        stack.enter_context(mock.patch.object(target, attr, phases.wrap(name, keep(fn) if attr == "_write" else fn)))
    for attr, name in (("render", "render (template + tokens + mask)"), ("deep", "deep (round-trip checks)")):
        stack.enter_context(mock.patch.object(renderer, attr, phases.wrap(name, getattr(renderer, attr))))
    return stack


def ours(store, folder: str, renderer, out: Path, max_length: int) -> tuple[float, float, Any, Phases, Any]:
    from app.core.datasets.builder import build
    from app.core.datasets.config import BuildConfig

    phases, captured = Phases(), {}
    config = BuildConfig(base_model=folder, max_length=max_length, name="bench")
    with instrumented(phases, renderer, captured):
        started, cpu = time.perf_counter(), time.process_time()
        manifest = build(store, config, renderer, out, lambda *_: None)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return elapsed, cpu, manifest, phases, captured["b"]


def profiled(store, folder: str, renderer, out: Path, max_length: int, top: int = 25) -> str:
    from app.core.datasets.builder import build
    from app.core.datasets.config import BuildConfig

    prof = cProfile.Profile()
    prof.enable()
    build(store, BuildConfig(base_model=folder, max_length=max_length, name="bench-profile"), renderer, out)
    prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top + 15)
    return text.getvalue()


def plain(store, tokenizer, out: Path, max_length: int) -> tuple[float, float, dict]:
    """The obvious loop: every stored session -> conversation -> apply_chat_template(tokenize=True) -> JSONL."""
    from sqlalchemy import select

    from app.core.base.schema import AgentSession, MessageRow
    from app.core.datasets.convert import conversation

    lengths, over, dropped_calls = [], 0, 0
    started, cpu = time.perf_counter(), time.process_time()
    with store.session() as s, out.open("w", encoding="utf-8") as fh:
        for sess in s.scalars(select(AgentSession).order_by(AgentSession.started_at, AgentSession.id)).all():
            rows = s.scalars(select(MessageRow).where(MessageRow.session_id == sess.id, MessageRow.branch == 0)
                             .order_by(MessageRow.seq)).all()
            conv = conversation(sess, rows)
            ids = tokenizer.apply_chat_template(conv.messages, tokenize=True)["input_ids"]
            fh.write(json.dumps({"session_id": sess.id, "messages": conv.messages, "input_ids": ids}) + "\n")
            lengths.append(len(ids))
            over += len(ids) > max_length
            dropped_calls += sum(len(m.get("tool_calls") or []) for m in conv.messages)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return elapsed, cpu, {"examples": len(lengths), "tokens": sum(lengths), "over": over, "calls": dropped_calls}


# --- figures ------------------------------------------------------------------------------------------------------
def pct(values: list[int], p: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def padded(lengths: list[int], batch: int) -> tuple[int, int]:
    """(padding tokens, slots) batching in the given order, each batch padded to its longest."""
    pad = slots = 0
    for i in range(0, len(lengths), batch):
        chunk = lengths[i:i + batch]
        slots += len(chunk) * max(chunk)
        pad += len(chunk) * max(chunk) - sum(chunk)
    return pad, slots


def ffd(lengths: list[int], capacity: int) -> list[int]:
    """First-fit decreasing into rows of `capacity` tokens (a max segment tree finds the first row with room)."""
    items = sorted((min(n, capacity) for n in lengths), reverse=True)
    size = 1
    while size < max(1, len(items)):
        size *= 2
    room = [capacity] * (2 * size)
    fills = [0] * size
    used = 0
    for n in items:
        i = 1
        while i < size:
            i = 2 * i if room[2 * i] >= n else 2 * i + 1
        fills[i - size] += n
        used = max(used, i - size + 1)
        room[i] -= n
        i //= 2
        while i:
            room[i] = max(room[2 * i], room[2 * i + 1])
            i //= 2
    return fills[:used]


def padding_table(lengths: list[int], capacities: list[int], batches: tuple[int, ...]) -> None:
    if not lengths:
        print("\npadding: no train examples")
        return
    shuffled = lengths[:]
    random.Random(0).shuffle(shuffled)
    print(f"\npadding, {len(lengths)} train examples (pad = tokens added to fill each batch to its longest row)")
    print(f"{'max_len':>7} {'batch':>5} | {'unpacked pad':>12} {'eff':>6} {'eff shuffled':>12} | {'packed rows':>11} "
          f"{'tok/row':>7} {'pad':>9} {'eff':>6} | {'padding saved':>13}")
    for cap in capacities:
        clipped = [min(n, cap) for n in lengths]
        real = sum(clipped)
        rows = ffd(clipped, cap)
        for batch in batches:
            pad_u, slots_u = padded(clipped, batch)
            pad_s, slots_s = padded([min(n, cap) for n in shuffled], batch)
            pad_p, slots_p = padded(rows, batch)
            saved = 1 - pad_p / pad_u if pad_u else 0.0
            print(f"{cap:>7} {batch:>5} | {pad_u:>12,} {real / slots_u:>6.1%} {real / slots_s:>12.1%} | "
                  f"{len(rows):>11,} {real / len(rows):>7.0f} {pad_p:>9,} {real / slots_p:>6.1%} | {saved:>13.1%}")
        over = sum(1 for n in lengths if n > cap)
        if over:
            print(f"        ({over} examples longer than {cap} clipped to it)")
    print("eff = real tokens / (real + padding); packed rows padded to the longest row of their batch (a padding-free "
          "collator with position ids has none at all)")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def tokenizer_folder(tmp: Path, given: str | None) -> tuple[str, str]:
    if given:
        return given, Path(given).name
    if (SMOLLM2 / "tokenizer.json").is_file():
        return str(SMOLLM2), "SmolLM2-135M-Instruct"
    print(f"NOTE: {SMOLLM2} is missing: falling back to a small BPE tokenizer built from tests/tiny_model.py "
          "(figures are NOT comparable with SmolLM2's)")
    from tests.tiny_model import build

    return str(build(tmp / "tiny")), "tiny BPE (fallback)"


def main() -> None:
    parser = argparse.ArgumentParser(description="Dataset build throughput vs a plain apply_chat_template loop; "
                                     "tokens per example; padding saved by packing.")
    parser.add_argument("--sessions", type=int, default=10000)
    parser.add_argument("--quick", action="store_true", help="500 sessions (a smoke run)")
    parser.add_argument("--max-length", type=int, default=2048, help="the build's max_length")
    parser.add_argument("--tokenizer", help="a model folder (default: the materialised SmolLM2-135M-Instruct)")
    parser.add_argument("--profile", action="store_true", help="also build once more under cProfile, print hot spots")
    parser.add_argument("--keep", type=Path, help="build into this folder and keep it (default: a temp dir)")
    args = parser.parse_args()
    n = 500 if args.quick else args.sessions

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["NIGHTSCHOOL_HOME"] = str(tmp / "home")
        from transformers import AutoTokenizer

        from app.core.base.store import Store
        from engine.render import Renderer

        folder, label = tokenizer_folder(tmp, args.tokenizer)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        renderer = Renderer(tokenizer, label)
        store = Store(tmp / "bench.db")
        t = time.perf_counter()
        made = populate(store, n)
        generated = time.perf_counter() - t
        db_mb = (tmp / "bench.db").stat().st_size / 1024**2
        print(f"corpus: {n} sessions + {made['sub-agent sessions']} sub-agent sessions = {made['session rows']} "
              f"session rows, {made['message rows']} message rows, {db_mb:.0f} MB SQLite (generated and stored in "
              f"{generated:.0f} s); {made['near-duplicates generated']} near-duplicates "
              f"({made['near-duplicates that pass the filters']} of sessions the filters keep); outcomes: "
              + ", ".join(f"{k.split()[1]} {v}" for k, v in sorted(made.items()) if k.startswith("outcome")))
        print(f"tokenizer: {label} ({renderer.convention}, training template "
              f"{'yes' if renderer.marked else 'no'}); max_length {args.max_length}; {os.cpu_count()} CPUs")

        out = args.keep or tmp / "built"
        rss_before = peak_rss_mb()
        mine, mine_cpu, man, phases, b = ours(store, folder, renderer, out, args.max_length)
        rss_after = peak_rss_mb()
        examples = man.examples
        sessions = b.counts["sessions"]
        print(f"\nnightschool build: {mine:.1f} s (CPU {mine_cpu:.1f} s) — {sessions / mine:.1f} sessions/s, "
              f"{examples / mine:.1f} examples/s "
              f"({examples} examples from {len(b.conversations)} sessions kept of {sessions})")
        print(f"  peak RSS {rss_after:,.0f} MB (before the build {rss_before:,.0f} MB): every example is held in "
              "memory until the write, with its text, ids, mask, offsets and preview segments")
        print("  removed: " + ", ".join(f"{k} {v}" for k, v in b.filters.items() if v))
        excluded = {k: v for k, v in b.counts.items() if k.startswith("excluded")}
        print("  excluded by checks: " + (", ".join(f"{k.split(': ')[-1]} {v}" for k, v in excluded.items())
                                          or "none"))
        accounted = sum(phases.total.values())
        print("  where the time goes (exclusive wall time):")
        for name, secs in sorted(phases.total.items(), key=lambda kv: -kv[1]):
            print(f"    {name:<34} {secs:8.2f} s {secs / mine:6.1%}  ({phases.calls[name]} calls)")
        print(f"    {'other (splits, Build, progress)':<34} {mine - accounted:8.2f} s {(mine - accounted) / mine:6.1%}")

        base, base_cpu, info = plain(store, tokenizer, tmp / "plain.jsonl", args.max_length)
        print(f"\nplain loop (convert + apply_chat_template(tokenize=True) + JSONL): {base:.1f} s "
              f"(CPU {base_cpu:.1f} s) — "
              f"{info['examples'] / base:.1f} sessions/s, {info['tokens']:,} tokens")
        print(f"  {info['over']} of {info['examples']} examples longer than {args.max_length} tokens (a trainer "
              f"truncates them); {info['calls']:,} tool calls in the messages"
              + ("" if renderer.native else ", none of them rendered (the template has no tool support: "
                                              "`tool_calls` are dropped silently)"))
        print(f"ratio ours / plain: wall time {mine / base:.2f}, CPU time {mine_cpu / base_cpu:.2f}")

        lengths = [len(e.rendered["input_ids"]) for e in b.examples]
        trained = sum(sum(e.rendered["assistant_masks"]) for e in b.examples)
        print(f"\ntokens per example ({len(lengths)} examples): min {min(lengths)}, p10 {pct(lengths, 10)}, "
              f"p50 {pct(lengths, 50)}, p90 {pct(lengths, 90)}, p99 {pct(lengths, 99)}, max {max(lengths)}, "
              f"mean {statistics.fmean(lengths):.0f}; trained share {trained / sum(lengths):.1%} "
              f"({trained:,} of {sum(lengths):,} tokens)")
        windows = Counter(e.session_id for e in b.examples)
        print(f"  windows per session: mean {statistics.fmean(windows.values()):.2f}, max {max(windows.values())}, "
              f"{sum(1 for v in windows.values() if v > 1)} sessions cut into several windows")

        train = [len(e.rendered["input_ids"]) for e in sorted(b.examples, key=lambda e: (e.session_id, e.window, e.id))
                 if e.split == "train"]
        padding_table(train, sorted({2048, args.max_length}), (4, 8))

        if args.profile:
            print("\ncProfile of a second build (same store):")
            print(profiled(store, folder, renderer, tmp / "built-profile", args.max_length))
        store.close()


if __name__ == "__main__":
    main()
