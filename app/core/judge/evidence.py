"""An evaluation's evidence for the gate: its report plus the per-example rows beside it (losses.jsonl,
generations.jsonl), and the paired units of each gated metric for two evaluations on the same held-out set, with the
session each unit comes from (the gate's interval resamples sessions). Rows name their session in `session_id`
(next actions always have; loss rows since the session-level interval); evidence written before, or a held-out file
whose records name no session, has none, and the gate falls back to resampling units and says so."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

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


class Paired(NamedTuple):
    """The units both evaluations have for a metric, in the same order, and each unit's session (None when any unit's
    rows name none: the units are then resampled one by one)."""

    after: list[Unit]
    before: list[Unit]
    sessions: list[str] | None


def paired(metric: str, after: Evidence, before: Evidence) -> Paired:
    """The units both evaluations have for `metric`, in the same order (paired by key; sorted, so repeatable), with
    their sessions (from either side's row: older evidence of one side may lack them)."""
    rows_a = after.losses if metric == "loss" else after.actions
    rows_b = before.losses if metric == "loss" else before.actions
    units_a, units_b, sessions = [], [], []
    for key in sorted(rows_a.keys() & rows_b.keys()):
        a, b = _unit(metric, rows_a[key]), _unit(metric, rows_b[key])
        if a is not None and b is not None:
            units_a.append(a)
            units_b.append(b)
            sessions.append(rows_a[key].get("session_id") or rows_b[key].get("session_id") or "")
    return Paired(units_a, units_b, sessions if all(sessions) else None)


def discordant(after: list[Unit], before: list[Unit]) -> tuple[int, int]:
    """(b, c) of yes/no units: b = only `before` was right (lost), c = only `after` was right (gained)."""
    lost = sum(1 for a, b in zip(after, before) if b[0] and not a[0])
    gained = sum(1 for a, b in zip(after, before) if a[0] and not b[0])
    return lost, gained
