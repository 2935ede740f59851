"""The evaluation worker on a held-out file with the tiny model: a report with finite numbers, cached the second time;
its per-example files sum to its report; a report from before them is evaluated again; a cancelled evaluation stops
its worker and records nothing; a file with nothing to evaluate is refused with why."""
from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from app.core.judge.evaluate import choose_set, evaluate, generations
from app.core.judge.records import JudgeError, Target, evals_of
from app.core.judge.report import FORMAT, LOSSES, EvalSettings, read_rows
from tests.conftest import write_jsonl
from tests.tiny_model import chat_records

SETTINGS = EvalSettings(max_contexts=8, max_new_tokens=16, samples=2)


def test_the_base_model_is_evaluated_then_cached(store, tiny_model, tmp_path):
    base = Target(str(tiny_model))
    evset = choose_set(store, base, file=write_jsonl(tmp_path / "heldout.jsonl", chat_records(8)))
    seen = []
    row, report = evaluate(store, base, evset, SETTINGS, sink=seen.append)
    assert report.contexts == 4 and report.examples == 8 and report.tokens > 0  # 4 distinct questions
    assert math.isfinite(report.metrics["loss"]) and report.metrics["perplexity"] > 1
    assert sum(report.outcomes.values()) == 4 and len(report.samples) == 2
    assert len(generations(row)) == 4 and all(g["teacher"].startswith("The capital of") for g in generations(row))
    # the per-example evidence the gate pairs: it sums to the report's loss; every next action has its tool calls
    losses = read_rows(Path(row.report_path).with_name(LOSSES))
    assert report.format == FORMAT and len({r["key"] for r in losses}) == len(losses) == report.examples
    assert sum(r["tokens"] for r in losses) == report.tokens
    assert sum(r["nll"] for r in losses) / report.tokens == pytest.approx(report.metrics["loss"], rel=1e-9)
    assert all({"attempted", "valid", "outcome", "reward"} <= g.keys() for g in generations(row))
    assert sum(g["attempted"] for g in generations(row)) == report.calls_attempted
    phases = {e.body.phase for e in seen if e.type == "progress"}
    assert {"base: loss", "base: generate"} <= phases  # progress names the model
    again, cached = evaluate(store, base, evset, SETTINGS)
    assert again.id == row.id and cached.metrics == report.metrics
    assert len(evals_of(store, base)) == 1
    old = Path(row.report_path)  # a report written before the per-example files: evaluated again
    old.write_text(old.read_text(encoding="utf-8").replace(f'"format": {FORMAT}', '"format": 1'), encoding="utf-8")
    rerun, _ = evaluate(store, base, evset, SETTINGS)
    assert rerun.id != row.id and len(evals_of(store, base)) == 2


def test_a_cancelled_evaluation_records_nothing(store, tiny_model, tmp_path):
    base = Target(str(tiny_model))
    evset = choose_set(store, base, file=write_jsonl(tmp_path / "heldout.jsonl", chat_records(8)))
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(JudgeError, match="was cancelled"):
        evaluate(store, base, evset, SETTINGS, cancel=cancel)
    assert evals_of(store, base) == []


def test_a_held_out_file_without_a_next_action_is_refused(store, tiny_model, tmp_path):
    base = Target(str(tiny_model))
    only_users = [{"messages": [{"role": "user", "content": "hello"}]}] * 3
    evset = choose_set(store, base, file=write_jsonl(tmp_path / "users.jsonl", only_users))
    with pytest.raises(JudgeError, match="has nothing to evaluate on") as err:
        evaluate(store, base, evset, SETTINGS)
    assert "nightschool dataset build" in str(err.value)
    with pytest.raises(JudgeError, match="is not a file"):
        choose_set(store, base, file=tmp_path / "missing.jsonl")
