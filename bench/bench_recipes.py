"""Benchmarks of the training recipes (print figures; not tests).

`packing`: useful (non-padding) trained tokens per second of engine SFT jobs with `Hyper.packing=True` (TRL BFD
packing + padding-free) vs `packing=False` (plain padding), on the same skewed-length agent-trace examples, one epoch
each, interleaved A B A B; ratio packing / padding (targets: >= 1.5x on a short-heavy mix, >= 1.3x on traces).
`--before` adds a packed job with sdpa's block mask over the whole row (the engine before engine.train.attention).

`memory`: peak RSS of the engine process (VmHWM, polled from /proc while it runs) and step time of each recipe (sft,
dpo, orpo, kto, grpo, rloo) on small data: the capital-city chats of tests/tiny_model.py, preference pairs made of
them with a wrong rejected answer, and the same chats as RL prompts.

    .venv/bin/python -m bench.bench_recipes packing [--model smollm2] [--examples 256] [--repeats 2] [--threads 1]
    .venv/bin/python -m bench.bench_recipes memory [--model smollm2] [--recipes sft,dpo] [--steps 8] [--threads 1]
    SmolLM2 at 2048 tokens, the engine now vs as it was (TRL's fused head, glibc's dynamic heap), one line:
    .venv/bin/python -m bench.bench_recipes memory --model smollm2 --recipes sft,sft:before --tokens 2048
        --steps 2 --batch 2 --grad-accum 1
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bench.machine import load_line, set_threads
from bench.trace_data import describe_lengths, packed_rows, padding_efficiency, trace_records

# --- running an engine job -------------------------------------------------------------------------------------------


class PeakSampler(threading.Thread):
    """Polls a process's peak RSS (VmHWM, the kernel's high-water mark: no peak between polls is missed) and RSS."""

    def __init__(self, pid: int, every: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.hwm_kb = 0
        self.rss_kb = 0
        self.done = threading.Event()

    def run(self) -> None:
        status = Path(f"/proc/{self.pid}/status")
        while not self.done.is_set():
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.hwm_kb = max(self.hwm_kb, int(line.split()[1]))
                    elif line.startswith("VmRSS:"):
                        self.rss_kb = max(self.rss_kb, int(line.split()[1]))
            except (OSError, ValueError, IndexError):
                try:  # not Linux: the largest RSS seen
                    import psutil

                    self.rss_kb = max(self.rss_kb, psutil.Process(self.pid).memory_info().rss // 1024)
                except Exception:  # noqa: BLE001 - psutil missing or the process gone: stop polling
                    return
            time.sleep(self.every)

    @property
    def peak_mb(self) -> float:
        return max(self.hwm_kb, self.rss_kb) / 1024


def run_job(manager, data: Path, model_ref: str, hyper, kind: str = "sft") -> dict:
    """Submit a real job (engine subprocess), sample its memory, wait, finalise; figures from its run dir."""
    from app.core.train.spec import JobSpec

    started = time.monotonic()
    job = manager.submit(data, model=model_ref, hyper=hyper, kind=kind)
    run = manager.latest_run(job.id)
    sampler = PeakSampler(run.pid)
    sampler.start()
    try:
        job = manager.wait(job.id, timeout=3600)
    finally:
        sampler.done.set()
        sampler.join()
    wall = time.monotonic() - started
    spec, _ = JobSpec.read(Path(job.spec_path))
    run_dir = Path(spec.run_dir)
    if job.state != "completed":
        return {"ok": False, "error": (job.error or job.state).strip().splitlines()[0][:300], "wall": wall,
                "peak_mb": sampler.peak_mb, "run_dir": run_dir}
    metrics = json.loads((run_dir / "result.json").read_text())["metrics"]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line]
    stamps = [e["ts"] for e in events if e["type"] == "metrics" and e["body"].get("loss") is not None]
    ram = [e["body"]["ram_mb"] for e in events if e["type"] == "metrics" and e["body"].get("ram_mb")]
    history = []
    checkpoints = sorted((run_dir / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    if checkpoints:
        history = json.loads((checkpoints[-1] / "trainer_state.json").read_text())["log_history"]
    num_tokens = [e["num_tokens"] for e in history if "num_tokens" in e]
    runtime = metrics["train_runtime_s"]
    return {"ok": True, "wall": wall, "runtime": runtime, "steps": metrics["steps"],
            "planned": metrics["planned_steps"], "num_tokens": num_tokens[-1] if num_tokens else None,
            "engine_tokens": metrics.get("tokens"),
            "step_s": statistics.median(b - a for a, b in itertools.pairwise(stamps)) if len(stamps) > 2 else None,
            "mean_step_s": runtime / max(metrics["steps"], 1), "peak_mb": sampler.peak_mb,
            "metrics_ram_max_mb": max(ram) if ram else None, "run_dir": run_dir,
            "first_loss": metrics.get("first_loss"), "last_loss": metrics.get("last_loss")}


@contextlib.contextmanager
def engine_env(**values: str):
    """Environment switches for the engine jobs started inside (they inherit this process's environment)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_plain_side(side: str, folder: Path, records: list[dict], hypers: dict, out: Path) -> dict:
    """A plain TRL SFTTrainer run in this process (bench_sft.run_plain) with the engine job's hyper-parameters, on the
    rows the engine trains on (tool calls as Hermes text: the model's template has no `tools` support)."""
    from bench.bench_sft import run_plain
    from engine.chat_template import normalise

    records = [{"messages": normalise(r["messages"])} for r in records]
    hyper = hypers["packing" if "packing" in side else "padding"]
    from engine.train import attention

    attn = attention.register() if side.endswith("varlen") else None
    r = run_plain(folder, records, hyper, out / side.replace(" ", "-"), hyper.max_steps, attn=attn)
    return {"ok": True, "num_tokens": r["tokens"], "runtime": r["runtime"], "steps": r["steps"],
            "mean_step_s": r["runtime"] / max(r["steps"], 1), "wall": r["wall"], "engine_tokens": None,
            "peak_mb": _own_peak_mb()}


def _own_peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def new_manager():
    from app.core.base.store import Store
    from app.core.train.jobs import JobManager

    return JobManager(Store())


# --- packing vs padding ----------------------------------------------------------------------------------------------


def bench_packing(a, tmp: Path) -> None:
    from transformers import AutoTokenizer

    from app.core.train.spec import Hyper
    from bench.bench_sft import prepare_model
    from engine.train import attention
    from engine.chat_template import training_template

    model_ref, folder = prepare_model(a.model, tmp)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.chat_template = training_template(tokenizer.chat_template)
    t0 = time.monotonic()
    records, lengths = trace_records(a.examples, tokenizer, a.max_length, alpha=a.alpha, short_share=a.short_share)
    gen_s = time.monotonic() - t0
    data = tmp / "traces.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    per_step = 2 * 8  # Hyper defaults: batch 2 x grad-accum 8
    rows = packed_rows(lengths, a.max_length)
    # one epoch each: the engine plans a padded job from its examples and a packed one from its packed rows
    base = {"epochs": 1.0, "max_steps": 100_000, "max_length": a.max_length, "save_steps": 100_000, "seed": 42}
    hypers = {"padding": Hyper(packing=False, **base), "packing": Hyper(packing=True, **base)}
    hypers["packing sdpa-mask"] = hypers["packing"]
    switches = {"packing sdpa-mask": {attention.SWITCH: "sdpa"}}  # the engine before per-example attention
    manager = new_manager()
    load_before = load_line()
    sides = ["padding", "packing"] + (["packing sdpa-mask"] if a.before else [])
    sides += ["plain padding", "plain packing", "plain packing+varlen"] if a.plain else []
    results: dict[str, list[dict]] = {side: [] for side in sides}
    for i in range(a.repeats):
        for side in (sides if i % 2 == 0 else sides[::-1]):
            if side.startswith("plain"):
                r = run_plain_side(side, folder, records, hypers, tmp / f"plain-{i}")
            else:
                with engine_env(**switches.get(side, {})):
                    r = run_job(manager, data, model_ref, hypers[side])
            if not r["ok"]:
                raise SystemExit(f"{side} job failed: {r['error']} (run dir {r['run_dir']})")
            r["tps"] = r["num_tokens"] / r["runtime"]
            results[side].append(r)
            print(f"  {side:8} #{i}: {r['num_tokens']} tokens in {r['runtime']:.1f} s = {r['tps']:.1f} tok/s, "
                  f"{r['steps']} steps, wall {r['wall']:.1f} s, peak RSS {r['peak_mb']:.0f} MB  [{load_line()}]",
                  flush=True)
    print(f"\n== packing vs padding: model={a.model}, {len(records)} examples (agent-trace prefixes, Pareto alpha "
          f"{a.alpha}; short chats: {a.short_share:.0%}), torch threads {a.threads_label}")
    print(f"before: {load_before}\nafter:  {load_line()}")
    print(f"generated in {gen_s:.1f} s; " + "\n".join(describe_lengths(lengths, a.max_length)))
    eff = padding_efficiency(lengths, 2)
    print(f"padding, random batches of 2: {eff:.1%} of computed tokens are real (so {1 / eff:.2f}x is the most "
          f"packing can gain if cost ~ tokens); BFD packing: {len(records)} examples -> {rows} rows of <= "
          f"{a.max_length} ({sum(lengths) / (rows * a.max_length):.1%} full)")
    planned = {side: runs[0]["planned"] for side, runs in results.items() if not side.startswith("plain")}
    print(f"steps planned by the engine (epochs=1): {planned}; one epoch = padding ceil({len(records)}/{per_step}) = "
          f"{math.ceil(len(records) / per_step)}, packing ceil({rows}/{per_step}) = {math.ceil(rows / per_step)}\n")
    print(f"{'run':24} {'tokens':>8} {'train_s':>8} {'tok/s':>8} {'steps':>6} {'step_s':>7} {'wall_s':>7} "
          f"{'peak_MB':>8}")
    for side, runs in results.items():
        for i, r in enumerate(runs):
            print(f"{side + '#' + str(i):24} {r['num_tokens']:>8} {r['runtime']:>8.1f} {r['tps']:>8.1f} "
                  f"{r['steps']:>6} {r['mean_step_s']:>7.2f} {r['wall']:>7.1f} {r['peak_mb']:>8.0f}")
    tp = {side: statistics.median(r["tps"] for r in runs) for side, runs in results.items()}
    if a.plain:
        print("\nin-process plain TRL (peak_MB there is the bench process's own high-water mark, cumulative):")
        for side in ("padding", "packing"):
            plain = tp["plain " + side]
            print(f"  plain {side:16} {plain:8.1f} tok/s; engine / plain {tp[side] / plain:.3f} (target >= 0.98)")
        varlen = tp["plain packing+varlen"]
        print(f"  plain packing+varlen   {varlen:8.1f} tok/s; / plain padding {varlen / tp['plain padding']:.3f}; "
              f"/ plain packing {varlen / tp['plain packing']:.3f} (per-example sdpa instead of one masked "
              "(sum L)^2 attention: engine.train.attention)")
    ratios = [p["tps"] / q["tps"] for p, q in zip(results["packing"], results["padding"])]
    same = {r["num_tokens"] for rs in results.values() for r in rs}  # one epoch of the same rows everywhere
    print(f"\nuseful tokens/s, median: padding {tp['padding']:.1f}, packing {tp['packing']:.1f}")
    print(f"ratio packing / padding: {tp['packing'] / tp['padding']:.3f} (pairs: "
          f"{', '.join(f'{x:.3f}' for x in ratios)})  target >= {a.target} -> "
          f"{'met' if tp['packing'] / tp['padding'] >= a.target else 'NOT met'}")
    if "packing sdpa-mask" in tp:
        print(f"ratio packing / packing with sdpa's block mask (before engine.train.attention): "
              f"{tp['packing'] / tp['packing sdpa-mask']:.3f}; sdpa-mask / padding "
              f"{tp['packing sdpa-mask'] / tp['padding']:.3f}")
    print("wall s (submit -> finalised), median: " + ", ".join(
        f"{side} {statistics.median(r['wall'] for r in runs):.1f}" for side, runs in results.items()))
    print("train s, median: " + ", ".join(
        f"{side} {statistics.median(r['runtime'] for r in runs):.1f}" for side, runs in results.items()))
    print(f"same tokens trained by every job: {'yes' if len(same) == 1 else 'NO: ' + str(sorted(same))} "
          f"(TRL num_tokens; the examples hold {sum(lengths)})")
    engine_tokens = {side: results[side][0]["engine_tokens"] for side in ("padding", "packing")}
    print(f"the engine's own token count (result.json tokens = num_input_tokens_seen non_padding): {engine_tokens}")


# --- memory per recipe -----------------------------------------------------------------------------------------------


def preference_pairs(n: int) -> list[dict]:
    """The capital-city chats as preference pairs: the right city chosen, a wrong one rejected."""
    from tests.tiny_model import chat_records

    out = []
    cities = ["Paris", "Madrid", "Rome", "Berlin"]
    for i, r in enumerate(chat_records(n)):
        user, answer = r["messages"]
        wrong = cities[(cities.index(answer["content"].split()[-1].rstrip(".")) + 1) % len(cities)]
        out.append({"prompt": [user], "chosen": [answer],
                    "rejected": [{"role": "assistant", "content": answer["content"].rsplit(" ", 1)[0] + f" {wrong}."}]})
    return out


# what each SFT variant switches off in the engine (engine.train.chunked_loss, engine.train.heap): "before" is the engine as it
# was (TRL's fused head, glibc's dynamic mmap threshold)
SFT_VARIANTS = {"sft": {}, "sft:trl-head": {"NIGHTSCHOOL_SFT_HEAD": "trl"}, "sft:glibc": {"NIGHTSCHOOL_HEAP": "glibc"},
                "sft:before": {"NIGHTSCHOOL_SFT_HEAD": "trl", "NIGHTSCHOOL_HEAP": "glibc"}}


def sft_windows(a, folder: Path, n: int) -> list[dict]:
    """Agent-trace windows of up to a.tokens tokens (the longest prefix of each generated session that fits)."""
    from bench.bench_sft import training_tokenizer

    records, lengths = trace_records(n, training_tokenizer(folder), a.tokens, alpha=0.01)
    print(f"SFT windows: {len(records)} examples; " + "; ".join(describe_lengths(lengths, a.tokens)), flush=True)
    return records


def bench_memory(a, tmp: Path) -> None:
    from app.core.train.spec import Hyper
    from bench.bench_sft import prepare_model
    from tests.tiny_model import chat_records

    model_ref, folder = prepare_model(a.model, tmp)
    chats, pairs, windows = tmp / "chats.jsonl", tmp / "pairs.jsonl", tmp / "windows.jsonl"
    per_step = a.batch * a.grad_accum
    chats.write_text("".join(json.dumps(r) + "\n" for r in chat_records(per_step * a.steps)), encoding="utf-8")
    pairs.write_text("".join(json.dumps(r) + "\n" for r in preference_pairs(per_step * a.steps)), encoding="utf-8")
    if a.tokens:
        windows.write_text("".join(json.dumps(r) + "\n" for r in sft_windows(a, folder, per_step * a.steps)),
                           encoding="utf-8")
    data = {"sft": windows if a.tokens else chats, "dpo": pairs, "orpo": pairs, "kto": pairs, "grpo": chats,
            "rloo": chats}
    manager = new_manager()
    load_before = load_line()
    rows = []
    for kind in a.recipes:
        recipe = kind.split(":")[0]
        hyper = Hyper(max_steps=a.steps, epochs=100.0, save_steps=10_000, batch_size=a.batch, grad_accum=a.grad_accum,
                      max_completion_length=a.completion_length, **({"max_length": a.tokens} if a.tokens else {}))
        with engine_env(**SFT_VARIANTS.get(kind, {})):
            r = run_job(manager, data[recipe], model_ref, hyper, kind=recipe)
        rows.append((kind, r))
        state = "ok" if r["ok"] else f"FAILED: {r['error']}"
        print(f"  {kind:12}: {state}; peak RSS {r['peak_mb']:.0f} MB, wall {r['wall']:.1f} s  [{load_line()}]",
              flush=True)
    print(f"\n== peak memory and step time per recipe: model={a.model}, max_steps {a.steps}, batch {a.batch} x "
          f"grad-accum {a.grad_accum}, LoRA r16, torch threads {a.threads_label}, RL completions <= "
          f"{a.completion_length} tokens" + (f", SFT on agent windows of <= {a.tokens} tokens" if a.tokens else ""))
    print(f"before: {load_before}\nafter:  {load_line()}\n")
    print(f"{'recipe':12} {'peak_RSS_MB':>11} {'metrics_ram_max':>15} {'steps':>6} {'train_s':>8} {'mean_step_s':>11} "
          f"{'median_step_s':>13} {'wall_s':>7}  loss first -> last")
    for kind, r in rows:
        if not r["ok"]:
            print(f"{kind:12} {r['peak_mb']:>11.0f}  not usable: {r['error']}")
            continue
        median = f"{r['step_s']:.2f}" if r["step_s"] is not None else "-"
        ram = f"{r['metrics_ram_max_mb']:.0f}" if r["metrics_ram_max_mb"] else "-"
        loss = " -> ".join(f"{x:.5f}" if x is not None else "-" for x in (r["first_loss"], r["last_loss"]))
        print(f"{kind:12} {r['peak_mb']:>11.0f} {ram:>15} {r['steps']:>6} {r['runtime']:>8.1f} "
              f"{r['mean_step_s']:>11.2f} {median:>13} {r['wall']:>7.1f}  {loss}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("packing", "memory"))
    parser.add_argument("--model", default="tiny", help="'tiny' (built in a temp dir) or 'smollm2' (embedded)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default); see set_threads")
    parser.add_argument("--examples", type=int, default=256, help="packing: trace examples (a multiple of 16)")
    parser.add_argument("--alpha", type=float, default=1.1, help="packing: Pareto shape of the lengths (lower: "
                        "more skewed)")
    parser.add_argument("--short-share", type=float, default=0.0, help="packing: share of short chat examples "
                        "(first sentences of a request and its answer) among the traces")
    parser.add_argument("--max-length", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=2, help="packing: pairs of jobs, interleaved")
    parser.add_argument("--before", action="store_true", help="packing: also a packed engine job with sdpa's "
                        "block mask over the whole row (the engine before engine.train.attention)")
    parser.add_argument("--target", type=float, default=1.5, help="packing: the packing / padding goal to report")
    parser.add_argument("--plain", action="store_true", help="packing: also plain TRL scripts in this process "
                        "(padding, packing, packing + the per-example attention prototype)")
    parser.add_argument("--recipes", default="sft,dpo,orpo,kto,grpo,rloo", help="memory: recipes; SFT variants "
                        "sft:trl-head, sft:glibc, sft:before switch the engine's chunked head / heap setting off")
    parser.add_argument("--tokens", type=int, default=0, help="memory: SFT on agent windows of up to this many "
                        "tokens (max_length); 0: the short capital-city chats")
    parser.add_argument("--batch", type=int, default=2, help="memory: per-device batch")
    parser.add_argument("--grad-accum", type=int, default=8, help="memory: gradient accumulation")
    parser.add_argument("--steps", type=int, default=8, help="memory: optimiser steps per recipe")
    parser.add_argument("--completion-length", type=int, default=32, help="memory: GRPO/RLOO max_completion_length")
    a = parser.parse_args(argv)
    a.recipes = [r.strip() for r in a.recipes.split(",") if r.strip()]
    a.threads_label = set_threads(a.threads)
    with tempfile.TemporaryDirectory(prefix="ns-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if a.what == "packing":
            bench_packing(a, tmp)
        else:
            bench_memory(a, tmp)


if __name__ == "__main__":
    main()
