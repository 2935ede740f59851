"""An evaluation's evidence for the gate: its report plus the per-example rows beside it (losses.jsonl,
generations.jsonl), and the paired units of each gated metric for two evaluations on the same held-out set."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from app.core.judge.report import GENERATIONS, LOSSES, REPORT, EvalReport, read_rows
from app.core.judge.stats import Unit

UNITS = {"loss": "examples", "agreement": "actions", "validity": "actions", "reward": "actions"}


@dataclass
class Evidence:
    """One model's evaluation: the report and its rows by key (loss examples; next actions)."""

    report: EvalReport
    losses: dict[str, dict] = field(default_factory=dict)
    actions: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Evidence:
        """From an evaluation folder (or its report.json)."""
        folder = Path(path) if Path(path).is_dir() else Path(path).parent
        report = EvalReport.read(folder / REPORT)
        return cls(report, {r["key"]: r for r in read_rows(folder / LOSSES)},
                   {r["key"]: r for r in read_rows(folder / GENERATIONS)})


def _unit(metric: str, row: dict) -> Unit | None:
    if metric == "loss":
        return float(row["nll"]), float(row["tokens"])
    if metric == "agreement":
        return float(row.get("outcome") == "agree"), 1.0
    if metric == "validity":
        return (float(row["valid"]), float(row["attempted"])) if "attempted" in row else None
    if metric == "reward":
        return (float(row["reward"]), 1.0) if row.get("reward") is not None else None
    raise ValueError(f"no paired units for {metric}")


def paired(metric: str, after: Evidence, before: Evidence) -> tuple[list[Unit], list[Unit]]:
    """The units both evaluations have for `metric`, in the same order (paired by key; sorted, so repeatable)."""
    rows_a = after.losses if metric == "loss" else after.actions
    rows_b = before.losses if metric == "loss" else before.actions
    units_a, units_b = [], []
    for key in sorted(rows_a.keys() & rows_b.keys()):
        a, b = _unit(metric, rows_a[key]), _unit(metric, rows_b[key])
        if a is not None and b is not None:
            units_a.append(a)
            units_b.append(b)
    return units_a, units_b


def discordant(after: list[Unit], before: list[Unit]) -> tuple[int, int]:
    """(b, c) of yes/no units: b = only `before` was right (lost), c = only `after` was right (gained)."""
    lost = sum(1 for a, b in zip(after, before) if b[0] and not a[0])
    gained = sum(1 for a, b in zip(after, before) if a[0] and not b[0])
    return lost, gained
