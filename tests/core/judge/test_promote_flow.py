"""Promotion end to end on real parts with a tiny model: a dataset built from captured sessions, SFT jobs through the
engine, the evaluation worker on the frozen held-out split, the gate, the deployed pointer, lineage, rollback. A cycle
that learned nothing is inconclusive against the base (not promoted); a trained checkpoint passes against the base
with its intervals and is promoted; the cycle that learned nothing then fails against it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli.main import main as cli
from app.core.base import protocol as P
from app.core.judge import promote as J
from app.core.judge.lineage import lineage
from app.core.judge.deployment import deployed
from app.core.judge.records import evals_of, passing_verdict, resolve
from app.core.judge.report import EvalSettings
from app.core.runtime.school import policy
from tests.conftest import fast_hyper
from tests.core.datasets.helpers import records
from tests.core.judge.conftest import build_heldout, builder_for

pytestmark = pytest.mark.slow
SETTINGS = EvalSettings(max_contexts=24, max_new_tokens=48)  # what the CLI flags and policy below ask for: one cache
# Stored session ids (so their stable-hash splits) depend on the files' paths: 40 % of 100 sessions holds out about 40
# (sd 4.9), more than the gate's 20 loss examples in any run
SESSIONS, TEST_SHARE = 100, 0.4


def train(manager, file, model, **hyper):
    over = {**dict(max_length=512, max_steps=150, lora_r=16, lora_alpha=32, learning_rate=1e-2), **hyper}
    job = manager.wait(manager.submit(file, model=str(model), hyper=fast_hyper(**over)).id, timeout=900)
    assert job.state == "completed", job.error
    return job


def test_promote_lineage_refuse_and_roll_back(store, manager, agent_dir, agent_model, capsys):
    ds = build_heldout(store, agent_dir, builder_for(store, agent_model), sessions=SESSIONS, test_share=TEST_SHARE)
    model = str(agent_model)
    # A cycle that learned nothing (a vanishing learning rate): no evidence it is better than the base, not promoted.
    idle = train(manager, Path(ds.path) / "train.jsonl", agent_model, learning_rate=1e-9, max_steps=10)
    seen = []
    unsure, none = J.promote(store, resolve(store, idle.id), settings=SETTINGS, sink=seen.append)
    assert unsure.verdict.verdict == "inconclusive" and none is None, unsure.verdict.reasons
    made = [e for e in seen if isinstance(e.body, P.Evaluated)]  # the candidate, then the base: one worker for both
    assert [e.body.label for e in made] == [unsure.target.label, "base"] and len({e.job for e in made}) == 1
    assert not any(e["reused"] for e in unsure.evaluated.values()) and all(e["seconds"] > 0 for e in
                                                                           unsure.evaluated.values())
    assert deployed(store, model) is None and all(c.ok and c.status != "improved" for c in unsure.verdict.checks)
    assert any("no primary metric" in n for n in unsure.verdict.notes)
    assert all("95 % CI" in c.text for c in unsure.verdict.checks)

    good = train(manager, Path(ds.path) / "train.jsonl", agent_model)
    judged, promoted = J.promote(store, resolve(store, good.id), settings=SETTINGS)
    cand, base = judged.reports["candidate"], judged.reports["base"]
    assert cand.eval_set == f"{ds.name}/test" and cand.contexts >= 5 and cand.eval_set_sha256 == base.eval_set_sha256
    assert cand.metrics["loss"] < base.metrics["loss"]
    assert judged.verdict.verdict == "pass", judged.verdict.reasons
    loss = judged.verdict.reasons[0]  # its interval and counts in words
    assert loss.startswith("held-out loss") and "95 % CI −" in loss and loss.endswith("vs the base model: improved")
    assert f", {cand.examples} examples)" in loss or " examples)" in loss
    assert promoted is not None and deployed(store, model).checkpoint_id == judged.target.id
    assert len(cand.samples) == min(8, cand.contexts) and all(s.teacher and s.prompt for s in cand.samples)

    # Lineage of the promoted checkpoint: its dataset's fingerprint and the sessions it came from.
    info = lineage(store, resolve(store, f"#{judged.target.id}"))
    assert info["deployed"] and info["dataset"]["name"] == ds.name
    assert info["dataset"]["fingerprint"] == ds.fingerprint
    trained_on = {s["id"] for s in info["dataset"]["sessions"] if s["split"] == "train"}
    assert trained_on == {r["session_id"] for r in records(Path(ds.path), "train")} and len(trained_on) >= 10
    assert info["verdicts"][0]["verdict"] == "pass" and info["job"]["code_hash"]
    ref = f"#{judged.target.id}"
    assert cli(["lineage", ref]) == 0
    out = capsys.readouterr().out
    assert ds.fingerprint in out and "DEPLOYED" in out
    # the text names the first sessions trained on, how many it leaves out and how to see them all
    [line] = [text for text in out.splitlines() if "trained on): " in text]
    head, _, tail = line.partition(" … ")
    listed = head.partition("trained on): ")[2].split(", ")
    assert f"({len(trained_on)} trained on)" in head and set(listed) <= trained_on
    assert len(listed) == len(set(listed)) == min(len(trained_on), 12)
    more = len(trained_on) - len(listed)
    assert tail == (f"and {more} more (nightschool lineage '{ref}' --json lists them all)" if more else ""), line
    assert cli(["lineage", ref, "--json"]) == 0  # every session, in any order
    sessions = json.loads(capsys.readouterr().out)["dataset"]["sessions"]
    assert {s["id"] for s in sessions if s["split"] == "train"} == trained_on

    # The cycle that learned nothing fails against the deployed model now, with reasons. The CLI judges as a cycle
    # does (the school policy's judge_* keys): the policy names SETTINGS' evaluator and loss examples, the options
    # the rest, so it reads the evaluations above from the cache.
    policy.set_value(store, "judge_with", "transformers")
    policy.set_value(store, "judge_examples", SETTINGS.max_examples)
    assert cli(["promote", idle.id, "--max-contexts", "24", "--max-new-tokens", "48"]) == 1
    out = capsys.readouterr().out
    assert "verdict on" in out and "FAIL" in out and "95 % CI" in out
    assert "vs the deployed model: significantly worse" in out or "vs the deployed model: worse by more than" in out
    assert cli(["promote", idle.id, "--max-contexts", "24", "--max-new-tokens", "48", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)  # the same verdict as data: each check's interval and counts
    assert data["verdict"] == "fail" and not data["promoted"]
    worse = [c for c in data["checks"] if not c["ok"] and c["status"] != "missing"]
    assert worse and all(c["low"] <= c["high"] and c["n"] > 0 and c["confidence"] == 0.95
                         for c in worse)
    idle_info = lineage(store, resolve(store, idle.id))
    assert idle_info["verdicts"][0]["verdict"] == "fail"
    assert passing_verdict(store, idle_info["checkpoint"]["id"]) is None
    assert deployed(store, model).checkpoint_id == judged.target.id  # the good model stays
    assert len(evals_of(store, judged.target)) == 1  # cached: the deployed model was not evaluated twice
    assert len(evals_of(store, resolve(store, idle.id))) == 1  # and the idle one once for its three verdicts

    # Rollback: back to the base model; the pointer file says so.
    assert cli(["rollback"]) == 0
    assert deployed(store, model).checkpoint_id is None and deployed(store, model).action == "rollback"
    pointer = json.loads((Path(store.path).parent / "deployed.json").read_text())
    assert pointer[model]["checkpoint_id"] is None
    assert cli(["rollback"]) == 2  # nothing left to roll back: a clear error
    assert "nothing to roll back" in capsys.readouterr().err
