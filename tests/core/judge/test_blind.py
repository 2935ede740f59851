"""The blind test's core on real parts: the shippable tiny model's held-out set built from captured sessions and its
answers evaluated through llama.cpp with the tool grammar (the `blind_school` fixture, once per session); a test drawn
from that evaluation (reused, not run again) across held-out sessions, stopped and resumed at its first unanswered
trial, finished, and a second test showing next actions not shown before. The figure: the indistinguishable share and
its session-level interval against ones computed by hand; in `school status`, on the report card and through MCP.
Bad input: no held-out set, a checkpoint gone from disk, an empty context, a pick that is none."""
from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

import pytest

from app.cli.main import main as cli
from app.core.base.schema import BlindTestRow, BlindTrialRow, CheckpointRow, EvalRow, Job, Run
from app.core.datasets import manifest
from app.core.datasets.catalog import Registry
from app.core.datasets.contexts import Context
from app.core.judge.blind import trials as T
from app.core.judge.blind.draw import Answers, answers, draw, served
from app.core.judge.blind.figure import GOAL, figure
from app.core.judge.blind.render import BlindError
from app.core.judge.evalset import EvalSet
from app.core.judge.evaluate import generations
from app.core.judge.records import Target
from app.core.runtime.school import cycles, policy
from app.core.runtime.school.facade import School
from app.core.train.spec import JobSpec
from tests.conftest import BLIND_TOKENS


def _held_out(store) -> tuple[dict[str, str], EvalSet, dict[str, Context]]:
    """The held-out dataset's session splits, and its contexts by key as the evaluation drew them."""
    model = policy.load(store).base_model
    ds = Registry(store).current_heldout(model)
    splits = {u.id: u.split for u in manifest.read(Path(ds.path)).sessions}
    found = answers(store, Target(model), policy.judge_settings(policy.load(store), max_new_tokens=BLIND_TOKENS))
    return splits, found.evset, found.contexts


@pytest.mark.slow  # the blind school: the shippable model's held-out set built and evaluated through llama.cpp once
def test_a_blind_test_draws_held_out_answers_stops_and_goes_on(blind_store):
    school, seen = School(blind_store), []
    test = school.blind_test(n=8, sink=seen.append, max_new_tokens=BLIND_TOKENS)
    assert seen == []  # the evaluation the school judged with is reused: nothing is generated again
    splits, evset, by_key = _held_out(blind_store)
    with blind_store.session() as s:
        gens = {g["key"]: g for g in generations(s.get(EvalRow, test.eval_id))}
    assert test.label == "base" and test.eval_set == evset.name and test.judge == "person" and test.seed == test.id
    assert [t.position for t in test.trials] == list(range(8)) and len({t.key for t in test.trials}) == 8
    for trial in test.trials:
        assert splits[trial.session_id] == "test"  # held out: never a trained session
        assert trial.messages == by_key[trial.key].messages  # the context as the student saw it
        assert (trial.teacher, trial.student) == (gens[trial.key]["teacher"], gens[trial.key]["student"])
        assert trial.sides[trial.agent_side] == trial.teacher and trial.pick is None
        view = trial.view()
        assert view.context.turns and "<tool_call>" not in repr((view.a, view.b))
    held_out_sessions = {sid for sid, split in splits.items() if split == "test"}
    assert len({t.session_id for t in test.trials}) == min(8, len(held_out_sessions))  # drawn across sessions
    assert {t.agent_side for t in test.trials} == {"A", "B"}
    again = draw(answers(blind_store, Target(test.base_model), served(policy.judge_settings(
        policy.load(blind_store), max_new_tokens=BLIND_TOKENS))), 8, test.seed)
    assert sorted(c.key for c in again) == sorted(t.key for t in test.trials)  # the test's seed draws it again

    # three answers, then the person stops: the same call goes on at the fourth trial
    picks = [(test.trials[0].agent_side, "A", 4.0), ("cant_tell", "same", 9.5),
             ("B" if test.trials[2].agent_side == "A" else "A", None, 2.25)]
    for trial, (pick, better, seconds) in zip(test.trials, picks):
        T.answer(blind_store, trial.id, pick, better, seconds)
    going = school.blind_test(n=8)
    assert going.id == test.id and going.answered == 3 and going.next_trial().position == 3
    assert [(t.pick, t.better, t.seconds) for t in going.trials[:3]] == picks
    assert going.trials[0].correct and not going.trials[1].correct and not going.trials[2].correct
    assert going.trials[0].student_was == ("worse" if going.trials[0].agent_side == "A" else "better")
    assert going.trials[1].student_was == "same" and going.trials[2].student_was is None
    assert all(t.answered_at is not None for t in going.trials[:3]) and going.finished_at is None

    for trial in going.trials[3:]:
        T.answer(blind_store, trial.id, trial.agent_side, None, 1.0)  # the agent found every time
    done = T.load(blind_store, test.id)
    assert done.done and done.finished_at is not None and done.next_trial() is None
    [result] = school.blind_results()
    assert (result["model"], result["trials"], result["indistinguishable"]) == ("base", 8, 2)
    assert result["share"] == 0.25 and result["goal"] == GOAL and result["chance"] == 0.5 and result["unanswered"] == 0

    fresh = school.blind_test(n=8, max_new_tokens=BLIND_TOKENS)  # a new test: next actions not shown before first
    assert fresh.id != test.id and len(fresh.trials) == 8
    usable = len(by_key.keys() & gens.keys())
    assert len({t.key for t in fresh.trials} & {t.key for t in test.trials}) == max(0, 16 - usable)
    [result] = school.blind_results()
    assert result["tests"] == 2 and result["trials"] == 8 and result["unanswered"] == 8


def _picks(per_session: list[tuple[int, int, int]]) -> list[tuple[str, str, str]]:
    """(agent side, pick, session) for sessions of (found the agent, picked the student, can't tell) trials."""
    out = []
    for i, (right, wrong, unsure) in enumerate(per_session):
        side = "AB"[i % 2]
        other = "B" if side == "A" else "A"
        out += [(side, side, f"s{i}")] * right + [(side, other, f"s{i}")] * wrong + [(side, "cant_tell", f"s{i}")
                                                                                       ] * unsure
    return out


def test_the_share_and_its_session_interval_match_a_hand_computation():
    # six sessions of four trials; indistinguishable (a wrong pick or can't tell) 0, 1, 2, 2, 3, 4 of them
    sessions = [(4, 0, 0), (3, 1, 0), (2, 0, 2), (2, 1, 1), (1, 2, 1), (0, 1, 3)]
    got = figure(_picks(sessions))
    assert (got.trials, got.indistinguishable, got.share, got.sessions) == (24, 12, 0.5, 6)
    # by hand: every one of the 6^6 equally likely resamples of six sessions (equal sizes: the share is the mean of
    # the sessions' shares), its 2.5th and 97.5th percentiles, widened about the estimate by t(5) / z · √(6/5) with
    # t(5, 0.975) = 2.5706 from a t table and z = 1.95996
    shares = [0.0, 0.25, 0.5, 0.5, 0.75, 1.0]
    means = sorted(statistics.fmean(draw) for draw in itertools.product(shares, repeat=6))
    low, high = (means[int(q * (len(means) - 1))] for q in (0.025, 0.975))
    wider = 2.5706 / 1.95996 * (6 / 5) ** 0.5
    assert got.low == pytest.approx(0.5 - wider * (0.5 - low), abs=0.03)
    assert got.high == pytest.approx(0.5 + wider * (high - 0.5), abs=0.03)
    assert 0.1 < got.low < 0.2 and 0.8 < got.high < 0.9
    # the same picks give the same interval; all found: 0 with no spread; one session: no interval; none: no share
    assert figure(_picks(sessions)) == got
    found = figure(_picks([(3, 0, 0), (2, 0, 0)]))
    assert (found.share, found.low, found.high) == (0.0, 0.0, 0.0)
    alone = figure(_picks([(1, 2, 1)]))
    assert alone.share == 0.75 and alone.low is None and alone.sessions == 1
    assert figure([]).share is None and figure([]).trials == 0
    # a widened interval stays a share
    wide = figure(_picks([(0, 2, 0), (2, 0, 0), (1, 1, 0)]))
    assert wide.low == 0.0 and wide.high == 1.0 and wide.share == 0.5


def _checkpoint(store, tmp_path, folder: Path) -> int:
    """A registered checkpoint's rows (its job's spec written) whose folder is `folder`."""
    spec = JobSpec(job_id="job-1", dataset_path="x", dataset_sha256="x", models_dir="m", run_dir="r",
                   socket_path="s", token="t", model="tiny")
    spec.write(tmp_path / "spec.json")
    with store.session() as s:
        s.add(Job(id="job-1", kind="sft", state="completed", priority="normal", dataset_path="/d.jsonl",
                  dataset_sha256="d" * 64, model_ref="tiny", spec_path=str(tmp_path / "spec.json"),
                  spec_sha256="s" * 64))
        s.flush()
        run = Run(job_id="job-1", run_dir=str(tmp_path), socket_path=str(tmp_path / "s"), state="completed")
        s.add(run)
        s.flush()
        ck = CheckpointRow(run_id=run.id, step=30, kind="adapter", path=str(folder))
        s.add(ck)
        s.flush()
        return ck.id


def test_the_figure_shows_in_school_status_the_report_card_and_mcp(store, tmp_path, capsys):
    from mcp import Client

    from app.mcp.server import build_server
    from tests.mcp.test_mcp import run_async

    (tmp_path / "ck").mkdir()
    ck = _checkpoint(store, tmp_path, tmp_path / "ck")
    cycle = cycles.create(store, "tiny", "run now (test)", {"new_sessions": 4})
    cycles.finish(store, cycle, "done", report={"checkpoint": ck, "summary": "cycle 1"})
    # the trials of a test a person took of the cycle's student (rows written here: drawing it needs a trained
    # checkpoint's evaluation, which the test above exercises on the base model)
    with store.session() as s:
        test = BlindTestRow(base_model="tiny", checkpoint_id=ck, label=f"#{ck} job-1 final", judge="person", seed=1)
        s.add(test)
        s.flush()
        for i, (side, pick, session) in enumerate(_picks([(2, 1, 1), (1, 1, 0), (0, 0, 2)])):
            s.add(BlindTrialRow(test_id=test.id, position=i, context_key=f"k{i}", session_id=session,
                                context_json="[]", teacher="t", student="s", outcome="", agent_side=side, pick=pick,
                                seconds=1.0))
    school = School(store)
    [shown] = school.status()["blind"]
    assert shown["checkpoint_id"] == ck and shown["trials"] == 8
    card = school.history()[0]["report"]["blind"]
    assert card == [shown]  # the card of the cycle whose student was tested: the figure as it is now
    assert cli(["school", "status"]) == 0
    out = capsys.readouterr().out
    assert f"Blind test: #{ck} job-1 final: {shown['share'] * 100:.0f} % indistinguishable (95 % CI" in out
    assert "8 trials, 3 sessions, by a person — goal above 45 %, chance 50 %" in out
    assert cli(["school", "show", str(cycle.id)]) == 0
    assert "Blind test of this student: #" in capsys.readouterr().out
    assert cli(["school", "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["blind"] == [shown]
    assert cli(["judge", "blind", "--results", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [shown]

    async def go() -> None:
        async with Client(build_server(store)) as client:
            got = await client.call_tool("blind_results", {})
            assert not got.is_error and got.structured_content["results"] == [shown]

    run_async(go)


def test_bad_input_is_refused_with_why(store, tmp_path, capsys):
    school = School(store)
    with pytest.raises(BlindError) as err:
        school.blind_test(model="base:/models/tiny")
    assert "the base model /models/tiny has no held-out set to draw a blind test from" in str(err.value)
    assert "nightschool dataset build" in str(err.value)
    assert cli(["judge", "blind", "--model", "base:/models/tiny"]) == 2
    assert "error: the base model /models/tiny has no held-out set" in capsys.readouterr().err

    ck = _checkpoint(store, tmp_path, tmp_path / "gone")
    with pytest.raises(BlindError) as err:
        school.blind_test(model=f"#{ck}")
    assert f"no blind test of #{ck}: checkpoint #{ck} is gone from disk" in str(err.value)
    assert "Pick another checkpoint" in str(err.value)

    empty = [Context([{"role": "system", "content": "Tools: Bash."}, {"role": "user", "content": " " * (i + 1)}],
                     {"role": "assistant", "content": "ok"}, "e", f"s{i}") for i in range(2)]
    found = Answers(Target("tiny"), EvalSet("held/test", tmp_path / "x", "0" * 64), None,
                    {c.key: {"teacher": "ok", "student": "hm"} for c in empty}, {c.key: c for c in empty})
    found.row = type("Row", (), {"id": 7})()
    with pytest.raises(BlindError) as err:
        draw(found, 4, seed=1)
    assert "every held-out context of held/test is empty (2 next actions)" in str(err.value)
    found.rows = {}
    with pytest.raises(BlindError, match="answered no context of its held-out set"):
        draw(found, 4, seed=1)

    for bad, words in ((lambda: T.answer(store, 1, "C"), "'C' is no pick"),
                       (lambda: T.answer(store, 1, "A", "better"), "'better' is no better answer"),
                       (lambda: T.answer(store, 1, "A", None, -1.0), "is no time taken"),
                       (lambda: T.answer(store, 99, "A"), "there is no blind trial 99"),
                       (lambda: T.load(store, 99), "there is no blind test 99"),
                       (lambda: T.start(store, Target("tiny"), policy.judge_settings(policy.load(store)), n=0),
                        "a blind test of 0 trials shows nothing")):
        with pytest.raises(BlindError, match=words):
            bad()
