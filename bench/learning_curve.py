"""Learning as curves: one run per recipe variant on the shared real fixtures, its checkpoints judged at several
budgets against the base on the same held-out next actions (session-level intervals), with the tokens and the CPU
time each point cost, and agreement gained per CPU hour.

    .venv/bin/python -m bench.bench_learning --curve [--variants standard,actions] [--steps 24 --every 8 [--at 8,24]]
                                             [--contexts 96] [--examples 64] [--max-length 1024]

The variants are the school's named recipes (app/core/train/variants.py). Every variant trains from the base model on the same dataset (a variant with its own build options — `decisions` —
builds its own from the same sessions; every variant is judged on the default build's held-out split, so all points
share one set of next actions and loss examples). Judged through llama.cpp as a CPU cycle judges, the gate's paired
comparisons giving each point's intervals. CPU time is the engine process's own (user + system, its children
included), sampled as each checkpoint appears."""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from app.core.train.variants import VARIANTS

BASE_HYPER = {"learning_rate": 5e-4, "batch_size": 4, "grad_accum": 1, "max_length": 1024, "epochs": 100,
              "lora_r": 16, "lora_alpha": 32, "warmup": 0.0}

@dataclass
class Point:
    variant: str
    step: int
    tokens: int
    cpu_s: float
    checkpoint: int
    checks: dict = field(default_factory=dict)  # metric -> the gate's check vs the base (dict)
    verdict: str = ""


def add_arguments(parser) -> None:
    parser.add_argument("--curve", action="store_true", help="learning curves of recipe variants (see "
                        "bench/learning_curve.py)")
    parser.add_argument("--variants", default="standard,actions", help=f"comma-separated: {', '.join(VARIANTS)}")
    parser.add_argument("--every", type=int, default=8, help="with --curve: a judged checkpoint every N steps")
    parser.add_argument("--at", default="", help="with --curve: judge only the checkpoints of these steps, e.g. 8,24 "
                        "(default: every one)")
    parser.add_argument("--contexts", type=int, default=96, help="with --curve: held-out next actions judged")
    parser.add_argument("--examples", type=int, default=64, help="with --curve: held-out loss examples")
    parser.add_argument("--max-length", type=int, default=1024, help="with --curve: tokens per training window")
    parser.add_argument("--keep", default="", help="with --curve: this folder as the data dir, kept afterwards "
                        "(default: a temporary one)")


class CpuClock:
    """The engine process's CPU seconds (user + system, children included), sampled every second; `at(step)` is the
    first sample taken after that step's checkpoint folder appeared."""

    def __init__(self, manager, job_id: str, run_dir: Path) -> None:
        self.manager, self.job_id, self.folder = manager, job_id, run_dir / "checkpoints"
        self.seen: dict[int, float] = {}
        self.last = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _cpu(self) -> float | None:
        import psutil

        run = self.manager.latest_run(self.job_id)
        if run is None or not run.pid:
            return None
        try:
            proc = psutil.Process(run.pid)
            times = [proc.cpu_times()] + [c.cpu_times() for c in proc.children(recursive=True)]
        except psutil.Error:
            return None
        return sum(t.user + t.system for t in times)

    def _loop(self) -> None:
        from app.core.train.checkpoints import step_of

        while not self.stop.wait(1.0):
            cpu = self._cpu()
            if cpu is None:
                continue
            self.last = max(self.last, cpu)
            for path in self.folder.glob("*") if self.folder.is_dir() else ():
                step = step_of(path)
                if step is not None and step not in self.seen:
                    self.seen[step] = self.last

    def at(self, step: int) -> float:
        return self.seen.get(step, self.last)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def _build(store, fixtures_built: dict, options: dict, max_length: int):
    """The dataset of these build options (built once per options)."""
    from app.core.datasets.catalog import Registry
    from app.core.datasets.config import BuildConfig, Filters
    from app.core.datasets.runs import start_build

    key = json.dumps(options, sort_keys=True)
    if key not in fixtures_built:
        name = "curve-" + ("-".join(f"{k}-{v}" for k, v in sorted(options.items())) or "default")
        done = start_build(store, BuildConfig(name=name, mode="full", max_length=max_length, val_share=0.0,
                                              test_share=0.3, filters=Filters(near_duplicate=0.0),
                                              **options)).finish()
        if not done.ok:
            raise SystemExit(f"the dataset build ({name}) failed: {done.message}")
        ds = Registry(store).get(done.name)
        print(f"dataset {name}: {ds.train} train / {ds.test} held-out examples")
        fixtures_built[key] = ds
    return fixtures_built[key]


def _train(store, manager, ds, variant: str, steps: int, every: int, max_length: int) -> list[Point]:
    from app.core.train.checkpoints import verify
    from app.core.train.spec import Hyper

    hyper = Hyper(**{**BASE_HYPER, **VARIANTS[variant].hyper, "max_steps": steps, "save_steps": every,
                     "keep_checkpoints": steps // every + 2, "max_length": max_length})
    started = time.perf_counter()
    job = manager.submit(Path(ds.path) / "train.jsonl", hyper=hyper)
    clock = CpuClock(manager, job.id, Path(manager.latest_run(job.id).run_dir))
    try:
        job = manager.wait(job.id, timeout=6 * 3600)
    finally:  # an interrupted bench must not leave its engine training (engines outlive their clients by design)
        clock.close()
        run = manager.latest_run(job.id)
        if run is not None and run.pid and manager.is_alive(run):
            os.kill(run.pid, 9)
    if job.state != "completed":
        raise SystemExit(f"{variant}: training failed: {job.error}")
    rows = {}
    for row in manager.checkpoints(job.id):  # the final adapter wins over the checkpoint of its step
        if row.kind == "adapter" or row.step not in rows:
            rows[row.step] = row
    points = []
    for step, row in sorted(rows.items()):
        info = verify(Path(row.path)) if row.kind == "checkpoint" else None
        tokens = info.tokens if info is not None else _final_tokens(Path(manager.latest_run(job.id).run_dir))
        points.append(Point(variant, step, tokens, clock.at(step) if row.kind == "checkpoint" else clock.last,
                            row.id))
    print(f"{variant}: {steps} steps in {time.perf_counter() - started:.0f} s wall, {clock.last:.0f} s of CPU; "
          f"checkpoints at steps {', '.join(str(p.step) for p in points)}")
    return points


def _final_tokens(run_dir: Path) -> int:
    try:
        return int(json.loads((run_dir / "result.json").read_text()).get("metrics", {}).get("tokens") or 0)
    except (OSError, ValueError):
        return 0


def _judge(store, points: list[Point], evset_name: str, settings) -> dict:
    """Every point and the base on one held-out set; each point's checks against the base (the gate's rules)."""
    from app.core.judge import gate
    from app.core.judge.evaluate import choose_set, evaluate_all
    from app.core.judge.evidence import Evidence
    from app.core.judge.records import Target, by_id

    targets = [by_id(store, p.checkpoint) for p in points]
    base = Target(targets[0].base_model)
    evset = choose_set(store, targets[0], evset_name)
    started = time.perf_counter()
    done = evaluate_all(store, [base] + targets, evset, settings)
    print(f"judged {len(targets)} checkpoints and the base on {evset.name}: {time.perf_counter() - started:.0f} s")
    base_ev = Evidence.read(Path(done[0].row.report_path))
    for point, evaluation in zip(points, done[1:]):
        verdict = gate.judge(Evidence.read(Path(evaluation.row.report_path)), base_ev, None, gate.Thresholds())
        point.verdict = verdict.verdict
        point.checks = {c.metric: c.model_dump() for c in verdict.checks}
    return {"base": done[0].report.metrics, "contexts": done[0].report.contexts, "examples": done[0].report.examples}


def _cell(check: dict | None, points: bool = False) -> str:
    if not check or check.get("delta") is None:
        return "n/a"
    scale, unit = (100, " pts") if points else ((100, " %") if check.get("relative") else (1, ""))
    low, high = check.get("low"), check.get("high")
    fmt = (lambda v: f"{v * scale:+.1f}") if scale == 100 else (lambda v: f"{v:+.3f}")
    ci = f" [{fmt(low)}…{fmt(high)}]" if low is not None else ""
    return f"{check['after']:.3f} ({fmt(check['delta'])}{unit if scale == 100 else ''}{ci})"


def table(points: list[Point], base: dict) -> str:
    lines = ["| variant | step | tokens | CPU min | loss (Δ, CI) | agreement (Δ, CI) | validity (Δ, CI) | "
             "reward (Δ, CI) | agreement pts / CPU h | vs base |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in points:
        agree = p.checks.get("agreement") or {}
        rate = (agree["delta"] * 100) / (p.cpu_s / 3600) if agree.get("delta") is not None and p.cpu_s else None
        lines.append(f"| {p.variant} | {p.step} | {p.tokens:,} | {p.cpu_s / 60:.1f} | {_cell(p.checks.get('loss'))} | "
                     f"{_cell(agree, True)} | {_cell(p.checks.get('validity'), True)} | "
                     f"{_cell(p.checks.get('reward'))} | {'n/a' if rate is None else f'{rate:+.1f}'} | {p.verdict} |")
    shown = ", ".join(f"{k} {v:.3f}" for k, v in base.items() if k in ("loss", "agreement", "validity", "reward")
                      and v is not None)
    return f"base: {shown}\n\n" + "\n".join(lines)


def run(args, fixtures: list[Path]) -> None:
    from app.core.base.store import Store
    from app.core.capture.ingest import Ingestor
    from app.core.capture.sources import CaptureConfig
    from app.core.importer import import_paths
    from app.core.judge.report import EvalSettings
    from app.core.scrub.scrubber import Scrubber
    from app.core.train.jobs import JobManager

    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {', '.join(unknown)}: choose from {', '.join(VARIANTS)}")
    load = os.getloadavg()
    store = Store()
    import_paths(Ingestor(store, CaptureConfig(roots={}), Scrubber()), [f for f in fixtures if f.is_dir()])
    built: dict = {}
    heldout = _build(store, built, {}, args.max_length)
    manager = JobManager(store)
    settings = EvalSettings(max_contexts=args.contexts, max_new_tokens=96, max_examples=args.examples, samples=4,
                            evaluator="llama.cpp")
    datasets = {name: _build(store, built, VARIANTS[name].build, args.max_length) for name in names}  # built first
    at = {int(x) for x in args.at.split(",") if x.strip()}
    points: list[Point] = []
    for name in names:
        print(f"\n== {name}: {VARIANTS[name].words}")
        points += [p for p in _train(store, manager, datasets[name], name, args.steps, args.every, args.max_length)
                   if not at or p.step in at]
    base = _judge(store, points, heldout.name, settings)
    print(f"\nheld-out: {base['contexts']} next actions, {base['examples']} loss examples of {heldout.name}; load "
          f"before {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, after {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores\n")
    print(table(points, base["base"]))
    print(json.dumps([p.__dict__ for p in points], default=str)[:20000])
