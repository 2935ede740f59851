"""What the eye teaches: a blind trial whose judge found the student's answer worse becomes a preference pair (chosen =
the agent's action, rejected = the student's answer, the same context; source "blind test", the trial and judge as
provenance); one judged better or the same is evidence, counted, never a pair; a person's trials make pairs by
default, a machine judge's only when chosen. The pairs join the mined ones in a preference build (the refining stage's
default config), counted by source in its report, in
`nightschool dataset show` and the Datasets tab's words — with a scripted student here, and through the real pairs
worker on a drawn blind test (the `blind_school` fixture) in the slow test."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli.main import main as cli
from app.core.datafiles.formats import SPECS, record_problem
from app.core.datasets import manifest as manifests
from app.core.datasets.catalog import Registry
from app.core.datasets.pair_records import BLIND, blind_pairs
from app.core.datasets.pairs import PairsConfig, build, plan
from app.core.judge.blind import trials as T
from app.core.toolcalls.convention import as_text
from tests.core.datasets.test_pairs_agreement import Scripted, built_sft, example
from tests.core.judge.blind_rows import call, context, stored_test

READ, LIST = call("Read", file_path="src/parser.py"), call("Bash", command="ls")


def _trial(i: int, side: str, student: str = LIST, key: str | None = None) -> dict:
    return {"messages": context(f"Fix the failing parser test (ticket {i})"), "teacher": READ, "student": student,
            "agent_side": side, "session_id": f"held-{i}", "key": key or f"key-{i}"}


def _answer(store, test_id: int, words: list[str | None]) -> None:
    """Answer each trial with the student's answer judged `worse` / `better` / `same` (None: not said)."""
    for trial, word in zip(T.load(store, test_id).trials, words):
        other = "B" if trial.agent_side == "A" else "A"
        better = {"worse": trial.agent_side, "better": other, "same": "same", None: None}[word]
        T.answer(store, trial.id, "cant_tell", better, 3.0)
        assert T.load(store, test_id).trials[trial.position].student_was == word


def test_a_trial_judged_worse_is_a_pair_and_the_rest_is_evidence(store):
    person = stored_test(store, "m", "person", [_trial(0, "A"), _trial(1, "B"), _trial(2, "A"), _trial(3, "B"),
                                                _trial(4, "A", student=READ), _trial(5, "A")])
    _answer(store, person, ["worse", "worse", "better", "same", "worse", None])
    stored_test(store, "m", "person", [_trial(9, "A")])  # not answered yet
    machine = stored_test(store, "m", "teacher", [_trial(7, "B")])
    _answer(store, machine, ["worse"])
    stored_test(store, "other-model", "person", [_trial(8, "A")])

    found = blind_pairs(store, "m")  # by default: a person's trials
    assert dict(found.evidence) == {"worse": 2, "better": 1, "same": 1, "agreed": 1}  # the same answer: no pair
    assert sorted(r["session_id"] for r in found.records) == ["held-0", "held-1"] == sorted(found.sessions)
    trials = {t.position: t for t in T.load(store, person).trials}
    for rec in found.records:
        i = int(rec["session_id"][-1])
        assert record_problem(SPECS["preference_v1"], rec) is None
        assert (rec["source"], rec["judge"], rec["blind_trial_id"], rec["turn"]) == (BLIND, "person", trials[i].id, 4)
        assert rec["prompt"] == [as_text(m) for m in trials[i].messages]  # the context the student saw
        assert rec["chosen"] == [{"role": "assistant", "content": READ}]  # the agent's action
        assert rec["rejected"] == [{"role": "assistant", "content": LIST}]  # the student's answer
    # a machine judge's trials only when chosen; none at all with no judge
    both = blind_pairs(store, "m", ("person", "teacher"))
    assert [r["judge"] for r in both.records].count("teacher") == 1 and len(both.records) == 3
    assert blind_pairs(store, "m", ()).records == []  # none when no judge is chosen

    # judged again in a later test (the same context, the same answer): the latest word counts
    later = stored_test(store, "m", "person", [_trial(0, "B")])
    _answer(store, later, ["better"])
    again = blind_pairs(store, "m", ["person"])
    assert sorted(r["session_id"] for r in again.records) == ["held-1"] and again.evidence["better"] == 2


def test_blind_test_pairs_join_a_preference_build_counted_by_source(store, tmp_path, capsys):
    built_sft(store, tmp_path, "sft-a", {"train": [example("s1", 0), example("s2", 0)],
                                         "test": [example("held-0", 0)]})
    person = stored_test(store, "m", "person", [_trial(0, "A"), _trial(1, "B"), _trial(2, "A")])
    _answer(store, person, ["worse", "same", "better"])
    machine = stored_test(store, "m", "teacher", [_trial(3, "A")])
    _answer(store, machine, ["worse"])
    student = Scripted({("s1", 2): "I give up.", ("s2", 2): "Fixed s2."})  # one mined pair, one agreement

    p = plan(store, PairsConfig(base_model="m", name="prefs"))  # the default: a person's trials, not the teacher's
    out = tmp_path / "prefs"
    man = build(p, student, out)
    records = list(manifests.iter_examples(out, "train"))
    assert [(r["source"], r["session_id"]) for r in records] == [("student", "s1"), (BLIND, "held-0")]
    report = json.loads((out / manifests.REPORT).read_text())
    assert (report["pairs"], report["student_pairs"], report["blind_pairs"]) == (2, 1, 1)
    assert report["by_source"] == {"student": 1, BLIND: 1}
    assert report["blind_test"]["evidence"] == {"worse": 1, "better": 1, "same": 1, "agreed": 0}
    assert report["blind_test"]["sessions"] == ["held-0"] and report["blind_test"]["judges"] == ["person"]
    assert man.counts["blind test pairs"] == 1
    assert [u.id for u in man.sessions] == ["s1", "s2"]  # the held-out session is no train session of the manifest
    Registry(store).register(out, manifests.write(out, man))  # the catalog takes it: it is a built dataset

    assert cli(["dataset", "show", "prefs"]) == 0
    shown = capsys.readouterr().out
    assert "1 student pairs, 0 from corrections, 1 from the blind test, 0 from your files" in shown
    assert "blind test: 1 answers judged worse than the agent's, 1 better, 1 the same (evidence, not pairs)" in shown

    from app.ui.datasets.words import Details, pairs_html

    html = pairs_html(Details(name="prefs", folder=out, report=report, manifest=man))
    assert "Pairs from the blind test</td><td>1<" in html

    # the teacher's trials join only when chosen, and none with --no-blind's config
    chosen = plan(store, PairsConfig(base_model="m", blind_judges=["person", "teacher"]))
    assert sorted(r["judge"] for r in chosen.blind.records) == ["person", "teacher"]
    assert plan(store, PairsConfig(base_model="m", blind_judges=[])).blind.records == []


@pytest.mark.slow  # the blind school: the shippable model's held-out set built and evaluated through llama.cpp once
def test_a_blind_trial_judged_worse_reaches_a_built_preference_dataset(blind_store, shippable_model):
    from app.core.datasets.runs import start_pairs
    from app.core.runtime.school.facade import School
    from tests.conftest import BLIND_TOKENS

    test = School(blind_store).blind_test(n=3, max_new_tokens=BLIND_TOKENS)
    for trial in test.trials:  # a person found the agent's answer better every time
        T.answer(blind_store, trial.id, trial.agent_side, trial.agent_side, 2.0)
    worse = {t.id: t for t in T.load(blind_store, test.id).trials}
    done = start_pairs(blind_store, PairsConfig(base_model=str(shippable_model), source="cycle-1", max_contexts=2,
                                                max_new_tokens=4)).finish()  # by default
    assert done.ok, done.message
    folder = Path(Registry(blind_store).get(done.name).path)
    got = [r for r in manifests.iter_examples(folder, "train") if r["source"] == BLIND]
    report = json.loads((folder / manifests.REPORT).read_text())
    kept = report["blind_test"]
    assert len(got) == report["blind_pairs"] == report["by_source"][BLIND] == kept["pairs"] >= 1
    assert kept["pairs"] + kept["evidence"]["agreed"] == 3  # each trial a pair, unless the student said the same
    for rec in got:
        trial = worse[rec["blind_trial_id"]]
        assert rec["judge"] == "person" and rec["session_id"] == trial.session_id
        assert rec["chosen"][0]["content"] == as_text({"role": "assistant", **_parsed(trial.teacher)})["content"]
    assert set(kept["sessions"]) <= {t.session_id for t in worse.values()}


def _parsed(text: str) -> dict:
    from app.core.toolcalls.convention import parse_student

    return {k: v for k, v in parse_student(text).items() if k != "role"}
