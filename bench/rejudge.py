"""Stored answers judged again under today's next-action rules, no model run: what an evaluation's figures become when
the rules change (nextaction.RULES_VERSION).

    .venv/bin/python -m bench.rejudge EVAL_FOLDER [EVAL_FOLDER ...]

Each folder is an evaluation's (`<data dir>/evals/eval-N`: report.json and generations.jsonl). The tool schemas are not
stored with the answers, so arguments are not checked against them here (`invalid_args` cannot occur); the figures as
recorded are printed beside for the same reason."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from app.core.judge.nextaction import judge
from app.core.judge.report import metrics_from, read_rows


def rejudge(folder: Path) -> tuple[dict, dict]:
    """(metrics, outcomes) of the folder's stored answers under today's rules (the loss left out)."""
    rows = read_rows(folder / "generations.jsonl")
    judged = [judge({"role": "assistant", "content": r["teacher"]}, r["student"], r["reward_context"]["tools"], None,
                    r.get("finished", True)) for r in rows]
    metrics, outcomes, _, _ = metrics_from(0.0, 0, judged, [r["reward"] for r in rows])
    return metrics, outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args()
    print("| evaluation | agreement, recorded → now | tool agreement | validity | outcomes now |")
    print("| --- | --- | --- | --- | --- |")
    missing = [str(f) for f in args.folders if not (f / "report.json").is_file() or not (f / "generations.jsonl").is_file()]
    if missing:
        raise SystemExit(f"not an evaluation's folder (report.json and generations.jsonl): {', '.join(missing)}")
    for folder in args.folders:
        before = json.loads((folder / "report.json").read_text())
        metrics, outcomes = rejudge(folder)
        cell = lambda k: (f"{before['metrics'].get(k) or 0:.3f} → "  # noqa: E731
                          f"{'n/a' if metrics[k] is None else format(metrics[k], '.3f')}")
        print(f"| {before['label']} | {cell('agreement')} | {cell('tool_agreement')} | {cell('validity')} | "
              + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())) + " |")


if __name__ == "__main__":
    main()
