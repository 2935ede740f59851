"""Queue estimates: a job's tokens from its snapshot, measured throughput per model, and a run's latest progress."""
from __future__ import annotations

import heapq
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from app.core.base import protocol as P
from app.core.base.schema import Job, Run
from app.core.base.store import Store
from app.core.train.spec import DATA_FORMAT, JobSpec

# Until a model has a completed run to measure, its throughput is assumed to be this: roughly what LoRA on
# SmolLM2-135M does on a laptop CPU (a GPU is 10-50x faster, so early ETAs err long, never short).
DEFAULT_TOKENS_PER_S = 300.0
STARTUP_S = 20.0  # engine start: imports, model load, tokenisation (a dry run is only this)
CHARS_PER_TOKEN = 4.0  # when the records carry no input_ids
RECENT_RUNS = 5  # completed runs of a model whose median tokens/s is its throughput
TAIL_BYTES = 64 * 1024  # how much of events.jsonl is read for a running job's latest progress and state

_snapshot_cache: dict[tuple[str, int, int], list[int]] = {}


@dataclass(frozen=True)
class Live:
    """What a running job's events say last: its engine state and its latest progress."""

    engine_state: str | None = None
    step: int | None = None
    total: int | None = None
    eta_s: float | None = None
    phase: str | None = None


# --- tokens --------------------------------------------------------------------------------------
def record_tokens(rec: dict, fmt: str) -> int:
    """Tokens of one snapshot record: its input_ids when present, else ~characters / 4 of its text."""
    if isinstance(rec.get("input_ids"), list):
        return len(rec["input_ids"])
    keys = {"chat": ("messages",), "preference": ("prompt", "chosen", "rejected"), "prompts": ("prompt",)}[fmt]
    chars = sum(_text_len(rec.get(k)) for k in keys)
    return max(1, math.ceil(chars / CHARS_PER_TOKEN))


def _text_len(value) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_text_len(v) for v in value)
    if isinstance(value, dict):
        return _text_len(value.get("content"))
    return 0


def snapshot_tokens(path: Path, fmt: str) -> list[int]:
    """Tokens per record of a snapshot (cached by path, size and mtime: snapshots do not change)."""
    try:
        st = path.stat()
    except OSError:
        return []
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _snapshot_cache:
        try:
            with path.open(encoding="utf-8") as fh:
                _snapshot_cache[key] = [record_tokens(json.loads(line), fmt) for line in fh if line.strip()]
        except (OSError, ValueError, AttributeError):
            return []
    return _snapshot_cache[key]


def planned_tokens(spec: JobSpec) -> int:
    """Tokens the job will train on: the snapshot x epochs, capped by max_steps x examples per step."""
    h, fmt = spec.hyper, DATA_FORMAT[spec.kind]
    counts = [min(c, h.max_length) for c in snapshot_tokens(Path(spec.dataset_path), fmt)]
    if not counts:
        return 0
    per_example = statistics.fmean(counts)
    if fmt == "prompts":  # RL: every prompt is answered num_generations times
        per_example += h.num_generations * h.max_completion_length
    per_step = h.batch_size * h.grad_accum * max(spec.processes, 1)
    return int(min(per_example * len(counts) * h.epochs, h.max_steps * per_step * per_example))


# --- throughput ----------------------------------------------------------------------------------
def throughput(store: Store, model: str) -> float:
    """Median tokens/s of the model's recent completed runs, else DEFAULT_TOKENS_PER_S."""
    with store.session() as s:
        rows = s.scalars(select(Run.result_json).join(Job).where(
            Job.model_ref == model, Run.state == "completed", Run.result_json.is_not(None))
            .order_by(Run.id.desc()).limit(RECENT_RUNS)).all()
    rates = [r for r in (_rate(raw) for raw in rows) if r]
    return statistics.median(rates) if rates else DEFAULT_TOKENS_PER_S


def _rate(raw: str) -> float | None:
    try:
        rate = json.loads(raw).get("metrics", {}).get("tokens_per_s")
    except (ValueError, AttributeError):
        return None
    return float(rate) if isinstance(rate, (int, float)) and rate > 0 else None


def estimate_s(spec: JobSpec, tokens_per_s: float) -> float:
    """Seconds a job will take from launch to end."""
    if spec.dry_run:
        return STARTUP_S
    return STARTUP_S + planned_tokens(spec) / max(tokens_per_s, 1e-6)


# --- a running job's events ----------------------------------------------------------------------
def live(events_path: Path) -> Live:
    """The latest engine state and training progress, from the tail of events.jsonl."""
    state = progress = None
    for env in reversed(tail_events(events_path)):
        if state is None and env.type == "state":
            state = env.body.state
        if progress is None and env.type == "progress":
            progress = env.body
        if state is not None and progress is not None:
            break
    if progress is None:
        return Live(engine_state=state)
    return Live(state, progress.step, progress.total, progress.eta_s, progress.phase)


def tail_events(path: Path, max_bytes: int = TAIL_BYTES) -> list[P.Envelope]:
    """The complete events in the last max_bytes of the file (a torn first or last line is skipped)."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(size - max_bytes, 0))
            data = fh.read()
    except OSError:
        return []
    lines = data.split(b"\n")
    if size > max_bytes:
        lines = lines[1:]  # begins mid-line
    out = []
    for raw in lines[:-1]:  # the part after the last newline is being written
        try:
            out.append(P.loads(raw))
        except P.ProtocolError:
            continue
    return out


def start_times(running_left: list[float], waiting: list[float], slots: int) -> list[float]:
    """When each waiting job starts (seconds from now), given what running jobs have left, the waiting jobs'
    durations in run order and how many jobs may run at once."""
    heap = list(running_left)
    heapq.heapify(heap)
    now, out = 0.0, []
    for duration in waiting:
        while len(heap) >= max(slots, 1):
            now = max(now, heapq.heappop(heap))
        out.append(now)
        heapq.heappush(heap, now + duration)
    return out
