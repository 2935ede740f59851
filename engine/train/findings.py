"""What the training checker reports: its thresholds, a finding (message, severity, diagnosis, evidence),
and the written record (diagnosis.md + alerts.jsonl, each appended in one write and fsync'd). Pure Python."""
from __future__ import annotations

import json
import math
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Kind = Literal["nan", "divergence", "grad-explosion", "overfit", "overfit-watch", "dead-lr", "stall"]
Severity = Literal["info", "warning", "fatal"]
RECENT = 10  # numbers of each series kept as evidence


@dataclass
class Thresholds:
    """When the checker speaks up. Every value can be changed; the defaults are chosen not to kill a healthy run.

    Divergence (fatal): the smoothed loss (an EMA, ``ema_alpha``; a plain running mean over the first points, so
    one lucky first batch does not become the reference) rises above ``divergence_factor`` x the best smoothed
    loss seen *and* at least ``divergence_min_rise`` nats above it, for ``divergence_patience`` logged points
    in a row. The best is tracked only after ``divergence_warmup_steps`` steps and ``divergence_min_points``
    logged losses. 2.5x: a learning rate that is too high sends the loss back towards ln(vocab) (~10), far
    beyond 2.5x; ordinary batch-to-batch noise, once smoothed, stays well inside it. The rise floor keeps a
    memorised loss (0.02 -> 0.06) from counting as divergence.

    Gradient explosion: a gradient norm (the pre-clipping norm the trainer logs) above ``grad_factor`` x the
    running median of the earlier norms (window ``grad_window``, spikes excluded, after ``grad_warmup_points``
    norms) and above ``grad_floor``, or above the absolute ``grad_ceiling`` at any time. One spike is a
    warning (clipping usually absorbs it); ``grad_patience`` in a row is fatal. The warning re-arms after
    ``grad_rearm_points`` normal norms in a row, so intermittent spikes do not alert every other step.

    Non-finite gradient norm: fatal after ``nonfinite_grad_patience`` in a row (1 here: this project trains in
    bf16 or fp32; with fp16 loss scaling an occasional inf norm is a skipped step, so raise it to ~3 there).

    Overfit: gap = eval loss - mean of the last ``gap_window`` train losses; > ``overfit_gap``
    (0.5) is a warning, > ``overfit_watch_gap`` (0.3) is info (watch), below is good.

    Dead learning rate (warning): lr <= ``dead_lr`` over at least ``dead_lr_steps`` steps while not in the
    schedule's warm-up and not in its last ``dead_lr_tail_frac`` of steps (nor the last ``dead_lr_steps``),
    where a decaying schedule legitimately reaches zero.

    Stall (warning): no training step for ``stall_s`` seconds (10 min: a step of a small model takes seconds
    even on a CPU; a checkpoint save or an evaluation touches the clock too).
    """

    ema_alpha: float = 0.1
    divergence_factor: float = 2.5
    divergence_min_rise: float = 0.5
    divergence_warmup_steps: int = 10
    divergence_min_points: int = 5
    divergence_patience: int = 2
    grad_factor: float = 10.0
    grad_floor: float = 1.0
    grad_ceiling: float = 1e3
    grad_window: int = 50
    grad_warmup_points: int = 5
    grad_patience: int = 3
    grad_rearm_points: int = 5
    nonfinite_grad_patience: int = 1
    overfit_watch_gap: float = 0.3
    overfit_gap: float = 0.5
    gap_window: int = 10
    dead_lr: float = 1e-10
    dead_lr_steps: int = 10
    dead_lr_tail_frac: float = 0.1
    stall_s: float = 600.0


@dataclass
class Finding:
    """One thing the checker saw: what (message), when (step), how bad (severity), and the written diagnosis."""

    kind: Kind
    severity: Severity
    step: int | None
    message: str
    diagnosis: str
    evidence: dict[str, Any] = field(default_factory=dict)
    ts: float = field(default_factory=time.time)

    @property
    def fatal(self) -> bool:
        return self.severity == "fatal"

    def to_dict(self) -> dict[str, Any]:
        return jsonable(asdict(self))


# --- the written record ------------------------------------------------------------------------------
_WRITE_LOCK = threading.Lock()


def write_diagnosis(run_dir: str | Path, finding: Finding) -> Path:
    """Append a readable section to ``run_dir/diagnosis.md`` and one JSON line to ``run_dir/alerts.jsonl``.

    Each is written with a single ``write`` on an O_APPEND descriptor, then fsync'd, so a crash leaves either
    the whole line / section or none of it. Returns the path of diagnosis.md.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    md = run_dir / "diagnosis.md"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(finding.ts))
    step = f"step {finding.step}" if finding.step is not None else "no step yet"
    evidence = "\n".join(f"- {k}: {fmt_evidence(v)}" for k, v in finding.evidence.items())
    section = (f"## {finding.severity.upper()} {finding.kind} at {step} ({when})\n\n"
               f"{finding.message}\n\n{finding.diagnosis}\n\nNumbers:\n{evidence}\n\n")
    line = json.dumps(finding.to_dict(), allow_nan=False, separators=(",", ":")) + "\n"
    with _WRITE_LOCK:
        if not md.exists():
            section = "# Training diagnosis\n\n" + section
        _append(md, section.encode("utf-8"))
        _append(run_dir / "alerts.jsonl", line.encode("utf-8"))
    return md


def _append(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        if written != len(data):  # a short write on a regular file means a full disk: finish it
            os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)


# --- formatting --------------------------------------------------------------------------------------
def as_float(value) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def jsonable(value):
    """Non-finite floats become strings ("nan", "inf"), so the JSON is strict and still says what was seen."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def fmt_series(values) -> str:
    items = list(values)[-RECENT:]
    return "[" + ", ".join(f"{v:.4g}@{s}" for s, v in items) + "]" if items else "(none)"


def fmt_evidence(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list) and value and all(isinstance(v, list) and len(v) == 2 for v in value):
        return ", ".join(f"{fmt_evidence(v)} @ step {s}" for s, v in value)
    return str(value)


def lines(*parts: str) -> str:
    return "\n".join(parts)
