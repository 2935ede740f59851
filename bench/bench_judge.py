"""The number the product lives by: the real SmolLM2-135M-Instruct default before and after one SFT cycle on the
real-world fixture sessions (../shared/fixtures/real-world and real-world-2), measured on the frozen held-out split — held-out loss,
next-action agreement, tool-call validity, behavioural reward — printed as a table. Everything goes through the
product: capture import, dataset build, a queued SFT job in the engine, the evaluation worker, the gate.

    .venv/bin/python -m bench.bench_judge [--steps 8] [--max-contexts 32] [--fixtures DIR ...]
                                          [--gguf q4_k_m,f16 [--repeats 3] [--base-only]]
                                          [--evaluators [both|llama.cpp|transformers]] [--grammar on|off|both]

With --gguf the judged model (the candidate; with --base-only the base, no training) is exported in those
quantizations and evaluated on the same held-out set through llama.cpp and through transformers, `--repeats` times
each: median wall time per side and their ratio, the in-worker time, model load times, and how the two agree.
With --evaluators the base model is judged by both evaluators (EvalSettings.evaluator) as a cycle would: times, load.
A judgement (and --evaluators) ends with the behavioural reward part by part: the teacher's own recorded actions
beside the models' answers on the same next actions (README.md, "The reward scored on the teacher's own actions").
With --grammar both the base is judged through llama.cpp without and with the tool-call grammar (EvalSettings.grammar)
on the same next actions: invalid calls, agreement, validity and the generation's tokens/s, the load beside each."""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
FIXTURES = [SHARED / "real-world", SHARED / "real-world-2"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, nargs="+", default=FIXTURES, help="transcript folders (default: "
                        "both shared real-world sets)")
    parser.add_argument("--steps", type=int, default=8, help="SFT steps (batch 4; ~40 s each on 2 CPU cores)")
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--max-contexts", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--max-examples", type=int, default=200, help="held-out examples the loss reads (a CPU "
                        "cycle reads 64: stages.CPU_LOSS_EXAMPLES)")
    parser.add_argument("--gguf", default="", help="quantizations to time the GGUF evaluation of, e.g. q4_k_m,f16")
    parser.add_argument("--repeats", type=int, default=3, help="evaluations per side for the GGUF timing (medians)")
    parser.add_argument("--base-only", action="store_true", help="with --gguf: no training, time the base model")
    parser.add_argument("--evaluators", nargs="?", const="both", choices=("both", "llama.cpp", "transformers"),
                        help="no training: the base judged through llama.cpp (as a CPU cycle judges) and through "
                             "transformers (the reference) on the same next actions, with the load, the times, their "
                             "ratio and how the two agree (or through one of them)")
    parser.add_argument("--grammar", choices=("on", "off", "both"), default="on",
                        help="tool calls under the grammar of the context's tools (llama.cpp; the default), without, "
                             "or both compared on the base model")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NIGHTSCHOOL_HOME"] = str(Path(tmp) / "home")
        run(args)


def run(args) -> None:
    from app.cli.judge import metric_table
    from app.core.base.store import Store
    from app.core.capture.ingest import Ingestor
    from app.core.scrub.scrubber import Scrubber
    from app.core.capture.sources import CaptureConfig
    from app.core.datasets.catalog import Registry
    from app.core.datasets.config import BuildConfig, Filters
    from app.core.importer import import_paths
    from app.core.judge import promote
    from app.core.judge.records import resolve
    from app.core.judge.report import EvalSettings
    from app.core.train.jobs import JobManager
    from app.core.train.spec import Hyper
    from app.core.datasets.runs import start_build

    store = Store()
    t0 = time.perf_counter()
    import_paths(Ingestor(store, CaptureConfig(roots={}), Scrubber()), list(args.fixtures))
    outcome = start_build(store, BuildConfig(name="bench", max_length=args.max_length, val_share=0.0, test_share=0.3,
                                             filters=Filters(near_duplicate=0.0))).finish()
    if not outcome.ok:
        raise SystemExit(f"the dataset build failed: {outcome.message}")
    ds = Registry(store).get(outcome.name)
    print(f"dataset from {', '.join(f.name for f in args.fixtures)}: {ds.train} train / {ds.test} held-out examples "
          f"({time.perf_counter() - t0:.0f} s to import and build)")
    settings = EvalSettings(max_contexts=args.max_contexts, max_new_tokens=args.max_new_tokens, samples=4,
                            max_examples=args.max_examples, grammar=args.grammar != "off")
    if args.grammar == "both":
        from app.core.judge.records import Target

        grammar_both(store, Target(ds.base_model), settings)
        return
    if args.evaluators:
        from app.core.judge.records import Target

        evaluators(store, Target(ds.base_model), settings, args.evaluators)
        return
    if args.base_only:
        from app.core.judge.records import Target

        gguf_timing(store, Target(ds.base_model), settings, args)
        return
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
    t2 = time.perf_counter()
    judged = promote.judge(store, resolve(store, job.id), settings=settings)
    base, cand = judged.reports["base"], judged.reports["candidate"]
    print(f"evaluations (base + candidate, {cand.contexts} next actions, {cand.examples} examples, "
          f"{cand.tokens} assistant tokens): {time.perf_counter() - t2:.0f} s\n")
    print(metric_table([("base SmolLM2", base.metrics), ("after 1 cycle", cand.metrics)]))
    reward_parts(store, {"base": judged.row.base_eval_id, "candidate": judged.row.eval_id})
    print("\noutcomes base:  " + ", ".join(f"{k} {v}" for k, v in sorted(base.outcomes.items())))
    print("outcomes cycle: " + ", ".join(f"{k} {v}" for k, v in sorted(cand.outcomes.items())))
    print(f"\ngate: {judged.verdict.summary()}")
    if args.gguf:
        gguf_timing(store, judged.target, settings, args)


def reward_parts(store, evals: dict) -> None:
    """The behavioural reward part by part on the same next actions: the teacher's own recorded actions beside each
    evaluation's answers (evals: name -> EvalRow or its id); a part that ranks the teacher below the base is marked."""
    from app.cli.school_print import print_reward_parts
    from app.core.base.schema import EvalRow
    from app.core.judge.evaluate import generations
    from app.core.judge.rewards import answer_breakdowns, parts_table, teacher_breakdowns

    with store.session() as s:
        gens = {name: generations(row if isinstance(row, EvalRow) else s.get(EvalRow, row))
                for name, row in evals.items()}
    print()
    print_reward_parts(parts_table(teacher_breakdowns(next(iter(gens.values()))),
                                   **{name: answer_breakdowns(g) for name, g in gens.items()}))


def evaluators(store, target, settings, which: str = "both") -> None:
    """One model, one held-out set, both evaluators (llama.cpp first: it includes converting the model to f16), the
    machine's load beside each time: other work on a shared machine slows both alike, so the ratio is the figure."""
    from app.core.judge.evaluate import choose_set, evaluate
    from app.core.judge.gguf import keyed

    evset = choose_set(store, target)
    got = {}
    for evaluator in ("llama.cpp", "transformers") if which == "both" else (which,):
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        row, report = evaluate(store, target, evset, settings.model_copy(update={"evaluator": evaluator}), force=True)
        wall = time.perf_counter() - t0
        got[evaluator] = (row, report, wall)
        print(f"{evaluator}: {report.contexts} next actions (max {settings.max_new_tokens} new tokens), "
              f"{report.examples} loss examples on {evset.name}: {wall:.0f} s wall ({report.elapsed_s:.0f} s in the "
              f"worker); load {load:.1f} before, {os.getloadavg()[0]:.1f} after, {os.cpu_count()} cores; "
              f"loss {report.metrics['loss']:.4f}, agreement {report.metrics['agreement']:.3f}, validity "
              f"{report.metrics.get('validity')}")
    reward_parts(store, {name: row for name, (row, _, _) in got.items()})
    if len(got) < 2:
        return
    (r1, c, w1), (r2, h, w2) = got["llama.cpp"], got["transformers"]
    a, b = keyed(Path(r1.report_path).parent), keyed(Path(r2.report_path).parent)
    same = sum(a[k]["outcome"] == b[k]["outcome"] for k in a if k in b)
    print(f"transformers / llama.cpp wall ratio {w2 / w1:.2f}; same next-action outcome {same} of {len(a)}; loss "
          f"{(c.metrics['loss'] - h.metrics['loss']) / h.metrics['loss']:+.3%} (llama.cpp vs transformers)")


def grammar_both(store, target, settings) -> None:
    """The base judged through llama.cpp without, then with, the tool-call grammar on the same next actions: invalid
    calls (outcome invalid_call; blocks attempted but not valid), agreement, validity, and tokens/s of the generation
    (from the worker's log: tokens sampled over the generation's seconds)."""
    import re

    from app.core.judge.evaluate import choose_set, evaluate

    evset = choose_set(store, target)
    for grammar in (False, True):
        logs: list[str] = []

        def sink(env) -> None:
            if env.type == "log":
                logs.append(env.body.message)

        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        _, report = evaluate(store, target, evset, settings.model_copy(update={"evaluator": "llama.cpp",
                                                                             "grammar": grammar}), sink, force=True)
        wall = time.perf_counter() - t0
        speed = next((m for m in map(re.compile(r"generated in ([\d.]+) s \((\d+) tokens").search, logs) if m), None)
        rate = f"{int(speed.group(2))} tokens in {float(speed.group(1)):.1f} s = " \
               f"{int(speed.group(2)) / float(speed.group(1)):.1f} tokens/s" if speed else "tokens/s not logged"
        print(f"grammar {'on ' if grammar else 'off'}: {report.contexts} next actions on {evset.name}: invalid_call "
              f"{report.outcomes.get('invalid_call', 0)}, blocks valid {report.calls_valid}/{report.calls_attempted}, "
              f"agreement {report.metrics['agreement']:.3f}, validity {report.metrics.get('validity')}, "
              f"tool agreement {report.metrics.get('tool_agreement')}; generation {rate}; {wall:.0f} s wall; load "
              f"{load:.1f} before, {os.getloadavg()[0]:.1f} after\n  outcomes: "
              + ", ".join(f"{k} {v}" for k, v in sorted(report.outcomes.items())))


def _load_s(target, gguf) -> tuple[float, float]:
    """Seconds to load the model in-process: transformers (+ the adapter) and llama.cpp on the GGUF."""
    from app.core.base import paths
    from engine import loading
    from engine.workers import smoke

    t0 = time.perf_counter()
    model, _, _ = loading.load_for_training(target.base_model, paths.models_dir(), lambda *a: None)
    if target.adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, target.adapter, is_trainable=False)
    hf = time.perf_counter() - t0
    del model
    t0 = time.perf_counter()
    smoke.load(gguf).close()
    return hf, time.perf_counter() - t0


def gguf_timing(store, target, settings, args) -> None:
    """The same held-out set evaluated through transformers and through llama.cpp on each exported quantization."""
    from statistics import median

    from app.core.judge.evaluate import choose_set, evaluate, generations
    from app.core.judge.gguf import compare, evaluate_gguf, keyed, tolerance
    from app.core.ship.exports import export

    evset = choose_set(store, target)
    quants = [q for q in args.gguf.split(",") if q]
    t0 = time.perf_counter()
    exp = export(store, target, quants, lora=False)
    print(f"\nexport of {target.label} ({', '.join(quants)}): {time.perf_counter() - t0:.0f} s")
    done = {}
    wall: dict[str, list[float]] = {"hf": [], **{q: [] for q in quants}}
    inside: dict[str, list[float]] = {k: [] for k in wall}
    for _ in range(args.repeats):  # interleaved: other work on the CPU weighs on both sides alike
        t0 = time.perf_counter()
        row, hf = evaluate(store, target, evset, settings, force=True)
        wall["hf"].append(time.perf_counter() - t0)
        inside["hf"].append(hf.elapsed_s)
        for quant in quants:
            t0 = time.perf_counter()
            done[quant] = evaluate_gguf(store, target, exp.path(quant), evset, settings, quant, force=True)
            wall[quant].append(time.perf_counter() - t0)
            inside[quant].append(done[quant].report.elapsed_s)
    hf_rows = {g["key"]: g for g in generations(row)}
    print(f"HF (transformers) evaluation on {evset.name}, {hf.contexts} next actions, {hf.examples} examples: "
          f"median {median(wall['hf']):.1f} s wall, {median(inside['hf']):.1f} s in the worker (n={args.repeats})")
    for quant in quants:
        got = compare(hf, hf_rows, done[quant].report, keyed(done[quant].folder), tolerance(store))
        load_hf, load_gguf = _load_s(target, exp.path(quant))
        print(f"GGUF {quant}: median {median(wall[quant]):.1f} s wall, {median(inside[quant]):.1f} s in the worker; "
              f"HF / GGUF wall ratio {median(wall['hf']) / median(wall[quant]):.2f}, in-worker ratio "
              f"{median(inside['hf']) / median(inside[quant]):.2f}; load {load_hf:.1f} s (transformers) vs "
              f"{load_gguf:.2f} s (llama.cpp)")
        print(f"  loss {got['metrics']['loss']['hf']:.4f} (HF) vs {got['metrics']['loss']['gguf']:.4f} "
              f"({got['loss_rel']:+.2%}); agreement {got['metrics']['agreement']['hf']:.3f} vs "
              f"{got['metrics']['agreement']['gguf']:.3f}; same outcome {got['outcome_agreement']:.0%} of "
              f"{got['contexts_compared']}, identical answers {got['same_text']}; tokenised like HF "
              f"{got['tokenization_matched']}/{got['examples']}; flag: {'; '.join(got['reasons']) or 'no'}")


if __name__ == "__main__":
    main()
