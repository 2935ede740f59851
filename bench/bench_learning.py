"""Does the student learn, cycle after cycle? A corpus (generated agent sessions plus the public Claude Code
transcripts of the shared fixtures) arrives in batches; the runtime runs its cycles by itself (trigger: new
sessions); per cycle the held-out loss, next-action agreement and tool-call validity of base / previous / candidate
with the gate's intervals and counts, the verdict, and the wall time. Goal: every promoted cycle significantly better
than the one before, and next-action agreement at least 20 points above the base after three cycles.

    .venv/bin/python -m bench.bench_learning [--model default|tiny] [--cycles 3] [--sessions 60] [--steps 40] [--test-share 0.35]
    .venv/bin/python -m bench.bench_learning --real [--cycles 3] [--steps 40] [--test-share 0.3]
    .venv/bin/python -m bench.bench_learning --curve [--variants standard,actions] [--steps 24 --every 8] [--contexts 96]

With --curve (bench/learning_curve.py) one run per recipe variant on the shared real fixtures, its checkpoints judged
at several budgets against the base: loss, agreement, validity and reward with session-level intervals, the tokens
and CPU time of each point, agreement gained per CPU hour.

With --real the corpus is the shared real-world fixtures only (real-world and real-world-2: Claude Code, Codex and
Gemini transcripts), their source folders dealt into --cycles batches; each batch is imported (as `nightschool
import` would) while the school is paused, then the school runs its cycle by itself.

The public fixtures are read from ../shared/fixtures/real-world (copied into a temporary agent folder at run time,
never into the project); without them the corpus is generated sessions only."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from bench import learning_curve

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real-world"
REAL = [FIXTURES, FIXTURES.with_name("real-world-2")]
ENDED = ("cycle.done", "cycle.refused", "cycle.failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="default (the embedded SmolLM2) or tiny")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=60, help="new generated sessions per cycle")
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per cycle (a cap)")
    parser.add_argument("--test-share", type=float, default=0.35, help="share of new sessions held out (the gate "
                        "needs 20 loss examples and 20 next actions before it says anything but inconclusive)")
    parser.add_argument("--no-fixtures", action="store_true", help="generated sessions only")
    parser.add_argument("--real", action="store_true", help="the shared real-world fixtures only, in batches")
    learning_curve.add_arguments(parser)
    args = parser.parse_args()
    if args.curve and args.keep:  # a data dir kept for a look afterwards (its jobs, checkpoints and evaluations)
        os.environ["NIGHTSCHOOL_HOME"] = str(Path(args.keep).resolve())
        learning_curve.run(args, REAL)
        return
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NIGHTSCHOOL_HOME"] = str(Path(tmp) / "home")
        if args.curve:
            learning_curve.run(args, REAL)
        else:
            run(args, Path(tmp))


def _model(args, tmp: Path) -> tuple[str, dict]:
    if args.model == "tiny":
        from tests.tiny_model import build_shippable

        path = build_shippable(tmp / "shippable" / "model")
        return str(path), {"learning_rate": 0.001, "batch_size": 4, "grad_accum": 1, "max_length": 512,
                           "epochs": 100}
    return args.model, {"learning_rate": 5e-4, "batch_size": 4, "grad_accum": 1, "max_length": 1024, "epochs": 100,
                        "lora_r": 16, "lora_alpha": 32}


def _public_claude_files() -> list[Path]:
    """Claude Code session files among the fixtures (the capture decides what it can use of them)."""
    if not FIXTURES.is_dir():
        return []
    out = []
    for path in sorted(FIXTURES.rglob("*.jsonl")):
        try:
            head = path.read_text(encoding="utf-8", errors="replace")[:4000]
        except OSError:
            continue
        if '"sessionId"' in head and "codex" not in path.parts and "gemini" not in path.name:
            out.append(path)
    return out


def _real_batches(count: int) -> list[list[Path]]:
    """The fixtures' source folders (one public repository each), dealt into `count` batches in a fixed order."""
    import hashlib

    folders = sorted((d for base in REAL if base.is_dir() for d in base.iterdir() if d.is_dir()),
                     key=lambda d: hashlib.sha256(d.name.encode()).hexdigest())
    return [folders[i::count] for i in range(count)]


def _import(school, batch: list[Path]) -> int:
    """The batch imported as finished transcripts with the school paused (it must not start on half a batch)."""
    from app.core.capture.ingest import Ingestor
    from app.core.capture.sources import CaptureConfig
    from app.core.importer import import_paths
    from app.core.scrub.scrubber import Scrubber

    school.pause()
    try:
        report = import_paths(Ingestor(school.store, CaptureConfig(roots={}), Scrubber()), batch)
    finally:
        school.resume()
    return len(report.transcripts)


def _write_batch(root: Path, first: int, count: int, fixtures: list[Path]) -> None:
    from tests.core.datasets.helpers import write_session

    for i in range(first, first + count):
        write_session(root, i, error_first=(i % 5 == 0))
    for n, path in enumerate(fixtures):
        shutil.copy(path, root / f"fixture-{n:02d}-{path.name}")


def _fmt(value) -> str:
    return "   n/a" if value is None else f"{value:6.3f}"


def _row(cycle, card: dict, wall: float) -> dict:
    metrics = card.get("metrics") or {}
    pick = {m: metrics.get(m, {}) for m in ("loss", "agreement", "validity")}
    return {"cycle": cycle.id, "state": cycle.state, "verdict": card.get("verdict"), "wall_s": round(wall, 1),
            "metrics": pick, "checks": card.get("checks") or card.get("reasons") or [], "times": card.get("times"),
            "judged_by": card.get("judged_by"), "evaluations": card.get("evaluations"),
            "deployed": card.get("deployed"), "examples": card.get("examples"), "reason": cycle.reason}


def _print(row: dict) -> None:
    print(f"\n== cycle {row['cycle']}: {row['state']} (gate: {row['verdict']}) in {row['wall_s']:.0f} s; "
          f"{row['examples']} examples; {row['reason'] or ''}")
    print(f"   {'metric':10} {'base':>7} {'previous':>8} {'candidate':>9}")
    for name, m in row["metrics"].items():
        print(f"   {name:10} {_fmt(m.get('base'))} {_fmt(m.get('previous')):>8} {_fmt(m.get('candidate')):>9}")
    for check in row["checks"]:
        print("   -", check.get("text") if isinstance(check, dict) else check)
    times = row.get("times") or {}
    print("   time per stage: " + ", ".join(f"{k} {v:.0f} s" for k, v in times.items() if v is not None)
          + f"; judged by {row.get('judged_by')}")


def run(args, tmp: Path) -> None:
    from app.core.base import paths
    from app.core.runtime.school import cycles
    from app.core.runtime.school.report_card import report_card
    from app.core.runtime.school.facade import School
    from app.core.runtime.supervisor import Runtime
    from app.core.ship import serving

    started_all = time.monotonic()
    model, hyper = _model(args, tmp)
    root = tmp / "agent" / "-home-me-proj"
    root.mkdir(parents=True)
    paths.data_dir().mkdir(parents=True, exist_ok=True)
    (paths.data_dir() / "capture.json").write_text(json.dumps({"roots": {"claude-code": [str(root.parent)]}}))
    fixtures = [] if args.no_fixtures or args.real else _public_claude_files()
    batches = _real_batches(args.cycles) if args.real else []
    if args.real:
        (paths.data_dir() / "capture.json").write_text(json.dumps({"roots": {}}))  # imported, not watched
    school = School()
    for key, value in {"min_sessions": 1 if args.real else args.sessions, "window": "any", "cooldown_min": 0, "deploy": "auto",
                       "refine_every": 0, "max_load": 1000, "base_model": model, "max_steps": args.steps,
                       "near_duplicate": 0.0, "test_share": args.test_share, "hyper": hyper, "max_length": hyper["max_length"],
                       "port": 0}.items():
        school.set_policy(key, value)
    load = os.getloadavg()
    runtime = Runtime(role="bench", cycle_s=1.0).start()
    ended = threading.Event()
    runtime.bus.subscribe(lambda e: ended.set() if e["type"] in ENDED else None)
    rows = []
    try:
        for n in range(args.cycles):
            ended.clear()
            started = time.monotonic()
            if args.real:
                files = _import(school, batches[n])
                print(f"\nbatch {n + 1}: {files} transcript files from {', '.join(d.name for d in batches[n])}")
            else:
                _write_batch(root, n * args.sessions, args.sessions, fixtures if n == 0 else [])
            if not ended.wait(7200):
                print(f"cycle {n + 1} did not end within 2 h")
                break
            cycle = cycles.history(school.store, 1)[0]
            rows.append(_row(cycle, report_card(school.store, cycle), time.monotonic() - started))
            _print(rows[-1])
    finally:
        runtime.stop()
        serving.stop()
    _verdict(rows, load, model, fixtures or [f for b in batches for f in b], time.monotonic() - started_all)


def _verdict(rows: list[dict], load, model: str, fixtures: list[Path], wall: float) -> None:
    print(f"\nmodel {model}; {len(fixtures)} public transcript files or folders; load before {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}, after {os.getloadavg()[0]:.2f} (2 cores); total {wall / 60:.1f} min")
    if not rows:
        return
    last = rows[-1]["metrics"].get("agreement", {})
    base, cand = last.get("base"), last.get("candidate")
    if base is not None and cand is not None:
        # the student serving after the cycles: the last candidate if the gate passed it, else the deployed one
        serving = cand if rows[-1]["verdict"] == "pass" else last.get("previous", base)
        gain = (serving - base) * 100
        print(f"next-action agreement after {len(rows)} cycles, on the last held-out set: base {base:.3f}, last "
              f"candidate {cand:.3f} ({(cand - base) * 100:+.1f} points), the student serving {serving:.3f} "
              f"({gain:+.1f} points; goal ≥ +20: {'met' if gain >= 20 else 'NOT met'})")
    promoted = [r for r in rows if r["verdict"] == "pass"]
    print(f"promoted {len(promoted)} of {len(rows)} cycles: "
          + ", ".join(f"#{r['cycle']} {r['verdict']}" for r in rows))
    print(json.dumps(rows, indent=1, default=str)[:20000])


if __name__ == "__main__":
    main()
