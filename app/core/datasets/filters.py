"""Session filters over stored sessions and their signals; each filter counts what it removed."""
from __future__ import annotations

import json
from collections import Counter
from typing import Any, Callable

from app.core.capture import actors
from app.core.datasets.config import Filters

Rule = tuple[str, Callable[[Any, dict], bool]]  # (name, keep?)
STUDENT_WORK = "the student's own work"  # a session only the student acted in (capture/actors): never an example


def _reasoning(sig: dict) -> int:
    return sum(int(sig.get(k, 0)) for k in ("reasoning_markers", "self_corrections", "constraints", "pruning"))


def rules(f: Filters) -> list[Rule]:
    """The enabled filters, in order, as (name, keep) pairs."""
    out: list[Rule] = [(STUDENT_WORK, lambda s, sig: getattr(s, "actor", actors.TEACHER) != actors.STUDENT)]  # always
    if not f.include_subagents:
        out.append(("sub-agent sessions", lambda s, sig: s.parent_id is None))
    if f.drop_abandoned:
        out.append(("abandoned", lambda s, sig: s.outcome != "abandoned"))
    if f.drop_errored:
        out.append(("errored", lambda s, sig: s.outcome != "errored"))
    if f.min_tool_calls:
        out.append((f"fewer than {f.min_tool_calls} tool calls", lambda s, sig: s.tool_calls >= f.min_tool_calls))
    if f.min_steps:
        out.append((f"fewer than {f.min_steps} steps", lambda s, sig: _steps(sig, s) >= f.min_steps))
    if f.require_recovery:
        out.append(("no recovery from an error", lambda s, sig: int(sig.get("recoveries", 0)) > 0))
    if f.min_reasoning:
        out.append((f"reasoning below {f.min_reasoning}", lambda s, sig: _reasoning(sig) >= f.min_reasoning))
    return out


def _steps(sig: dict, s: Any) -> int:
    """Assistant steps: tool calls made plus a final answer (a session that only answers is one step)."""
    return len(sig.get("tool_sequence", [])) + (1 if s.outcome == "finished" else 0)


def apply(sessions: list[Any], f: Filters, verdicts: dict[str, str] | None = None) -> tuple[list[Any], Counter]:
    """Keep the sessions every rule keeps; count removals under the first rule that removed each (and name it in
    `verdicts`, by session id, when given)."""
    removed: Counter = Counter()
    kept = []
    checks = rules(f)
    for s in sessions:
        sig = json.loads(s.signals_json or "{}")
        failed = next((name for name, keep in checks if not keep(s, sig)), None)
        if failed:
            removed[failed] += 1
            if verdicts is not None:
                verdicts[s.id] = failed
        else:
            kept.append(s)
    return kept, removed
