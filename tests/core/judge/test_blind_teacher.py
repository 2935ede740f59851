"""The blind test judged by the teacher over its OpenAI-compatible API — here a stand-in server on loopback (a hosted
API cannot be reached from CI: tests/core/experience/standin.py): each trial sent as the text a person reads, a strict
JSON answer parsed, a malformed one asked again once then stored as can't tell and said, the calls counted against
the teacher's budget, a failure leaving the rest for later; its trials stored apart and labelled as the teacher's in
`school status`, on the report card, in `judge blind --results` and through MCP. Trials are written as rows: drawing
a test needs a held-out set's evaluation (tests/core/judge/test_blind.py)."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from app.cli.main import main as cli
from app.core.base.schema import TeacherCallRow
from app.core.experience import config
from app.core.judge.blind import machine, trials as T
from app.core.judge.blind.render import BlindError
from app.core.runtime.school import cycles, policy
from app.core.runtime.school.facade import School
from tests.core.experience.standin import StandInTeacher, chat
from tests.core.judge.blind_rows import call, context, stored_test
from tests.core.judge.test_blind import _checkpoint

READ = call("Read", file_path="src/parser.py")
LIST = call("Bash", command="ls")
EDIT = call("Edit", file_path="src/parser.py", old_string="return None", new_string="return []")


def trials(n: int = 3) -> list[dict]:
    """n trials of three held-out sessions, the agent's answer on A, then B, then A…"""
    tasks = ["Fix the failing parser test", "Why does the tokenizer drop the last line?", "Add a --json flag"]
    return [{"messages": context(tasks[i % 3]), "teacher": [READ, EDIT][i % 2], "student": LIST,
             "agent_side": "AB"[i % 2], "session_id": f"s{i % 3}"} for i in range(n)]


def said(agent: str, better: str) -> tuple:
    return chat({"content": json.dumps({"agent": agent, "better": better})}, prompt_tokens=50, completion_tokens=10)


@pytest.fixture
def teacher(store):
    standin = StandInTeacher()
    config.set_teacher(store, "url", standin.url)
    config.set_teacher(store, "model", "stand-in-teacher")
    yield standin
    standin.close()


@pytest.mark.parametrize(("text", "expected"), [
    ('{"agent": "A", "better": "same"}', ("A", "same")),
    ('  ```json\n{"better": "B", "agent": "cant_tell"}\n```\n', ("cant_tell", "B")),
    ('The agent is A. {"agent": "A", "better": "A"}', None),  # words around it: not the answer asked for
    ('{"agent": "A"}', None), ('{"agent": "C", "better": "A"}', None), ('{"agent": "A", "better": "worse"}', None),
    ('{"agent": "A", "better": "A", "why": "…"}', None), ('["A", "A"]', None), ("A", None), ("", None),
])
def test_only_the_json_answer_asked_for_is_read(text, expected):
    assert machine.parse(text) == expected


def test_the_teacher_judges_the_trials_it_reads_as_a_person_does(store, teacher):
    test_id = stored_test(store, policy.load(store).base_model, "teacher", trials(3))
    test = T.load(store, test_id)
    first, second, third = test.trials
    prompts = [machine.prompt(t)[-1]["content"] for t in test.trials]
    teacher.answer(prompts[0], said(first.agent_side, first.agent_side))  # found, and the agent's is better
    teacher.answer(prompts[1], chat({"content": "B, I think."}))  # malformed: asked once more, and answered
    teacher.answer(prompts[2], chat({"content": "I cannot decide."}))  # malformed twice: can't tell, said
    teacher.answer(machine.AGAIN, said("A", "same"), chat({"content": "Still no."}))  # the two "once more"s

    run = machine.judge(store, test)
    assert (run.judged, run.malformed, run.stopped_because) == (3, 1, "")
    assert run.tokens == 2 * 60 + 3 * 120  # every call's tokens (the stand-in's chat() counts 120)
    done = T.load(store, test_id)
    assert done.done and done.judge == "teacher"
    assert [(t.pick, t.better) for t in done.trials] == [(first.agent_side, first.agent_side), ("A", "same"),
                                                         ("cant_tell", None)]
    assert done.trials[0].correct and done.trials[0].student_was == "worse" and done.trials[1].correct is False
    assert [t["malformed"] for t in run.trials] == [False, False, True]

    # what the teacher read: the protocol, the context and the two answers as text, never a raw tool call
    bodies = [r["body"] for r in teacher.received]
    assert len(bodies) == 5 and all(b["model"] == "stand-in-teacher" and b["temperature"] == 0 for b in bodies)
    asked = bodies[0]["messages"]
    assert asked[0]["content"] == machine.SYSTEM and "<tool_call>" not in asked[1]["content"]
    assert "Fix the failing parser test" in asked[1]["content"] and "▸ Read" in asked[1]["content"]
    assert "Answer A:" in asked[1]["content"] and "Answer B:" in asked[1]["content"]
    assert bodies[2]["messages"][-2:] == [{"role": "assistant", "content": "B, I think."},
                                          {"role": "user", "content": machine.AGAIN}]
    with store.session() as s:  # each call counts against the teacher's day, named by its trial
        calls = list(s.scalars(select(TeacherCallRow).order_by(TeacherCallRow.id)))
    assert [c.experience_id for c in calls] == [f"blind:{t.id}" for t in (first, second, second, third, third)]


def test_a_teacher_that_fails_leaves_the_rest_for_later(store, teacher):
    test_id = stored_test(store, policy.load(store).base_model, "teacher", trials(3))
    test = T.load(store, test_id)
    teacher.answer(machine.prompt(test.trials[0])[-1]["content"], said("A", "A"))
    teacher.default = (500, {"Content-Type": "text/plain"}, b"overloaded")
    run = machine.judge(store, test)
    assert run.judged == 1 and run.stopped_because == "the teacher failed (HTTP 500): overloaded"
    assert T.load(store, test_id).answered == 1  # the failed trial is not stored as anything

    teacher.default = said("cant_tell", "same")
    again = machine.judge(store, T.load(store, test_id))  # goes on at the first unanswered trial
    assert again.judged == 2 and again.stopped_because == "" and T.load(store, test_id).done

    person = stored_test(store, "tiny", "person", trials(1))
    with pytest.raises(BlindError, match="is person's to answer, not the teacher's"):
        machine.judge(store, T.load(store, person))


def test_no_teacher_configured_is_refused_before_anything_is_drawn(store, capsys):
    with pytest.raises(BlindError) as err:
        School(store).blind_test(judge="teacher")  # no held-out set either: the teacher is what is said
    assert "the teacher cannot judge a blind test now" in str(err.value)
    assert "The teacher is not configured: no URL, no model" in str(err.value)
    assert "nightschool experience teacher url URL" in str(err.value) and "nightschool judge blind" in str(err.value)
    assert cli(["judge", "blind", "--judge", "teacher"]) == 2
    assert "error: the teacher cannot judge a blind test now" in capsys.readouterr().err


def test_the_teachers_figure_is_apart_and_labelled_everywhere(store, teacher, tmp_path, capsys):
    from mcp import Client

    from app.mcp.server import build_server
    from tests.mcp.test_mcp import run_async

    (tmp_path / "ck").mkdir()
    ck = _checkpoint(store, tmp_path, tmp_path / "ck")
    cycle = cycles.create(store, "tiny", "run now (test)", {"new_sessions": 4})
    cycles.finish(store, cycle, "done", report={"checkpoint": ck, "summary": "cycle 1"})
    label = f"#{ck} job-1 final"
    person = stored_test(store, "tiny", "person", trials(3), checkpoint_id=ck, label=label)
    for trial in T.load(store, person).trials:
        T.answer(store, trial.id, trial.agent_side, None, 2.0)  # a person found the agent every time
    by_teacher = stored_test(store, "tiny", "teacher", trials(3), checkpoint_id=ck, label=label)
    teacher.default = said("cant_tell", "same")
    assert machine.judge(store, T.load(store, by_teacher)).judged == 3

    school = School(store)
    found = {r["judge"]: r for r in school.blind_results()}
    assert (found["person"]["share"], found["teacher"]["share"]) == (0.0, 1.0)
    assert found["person"]["trials"] == found["teacher"]["trials"] == 3
    assert school.blind_results("teacher") == [found["teacher"]]
    card = school.history()[0]["report"]["blind"]
    assert sorted(r["judge"] for r in card) == ["person", "teacher"]
    assert cli(["school", "status"]) == 0
    out = capsys.readouterr().out
    assert f"Blind test: {label}: 100 % indistinguishable (95 % CI" in out and "by the teacher — goal" in out
    assert f"Blind test: {label}: 0 % indistinguishable" in out and "by a person — goal" in out
    assert cli(["judge", "blind", "--results", "--judge", "teacher", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [found["teacher"]]

    async def go() -> None:
        async with Client(build_server(store)) as client:
            got = await client.call_tool("blind_results", {})
            assert not got.is_error
            assert {r["judge"]: r["share"] for r in got.structured_content["results"]} == {"person": 0.0,
                                                                                           "teacher": 1.0}

    run_async(go)


def test_judge_blind_by_the_teacher_in_the_terminal(store, teacher, capsys):
    base = policy.load(store).base_model
    test_id = stored_test(store, base, "teacher", trials(2))  # drawn earlier, not judged yet: the command goes on
    test = T.load(store, test_id)
    teacher.answer(machine.prompt(test.trials[0])[-1]["content"], said(test.trials[0].agent_side, "same"))
    teacher.default = chat({"content": "no idea"})
    assert cli(["judge", "blind", "--judge", "teacher", "--json"]) == 0
    captured = capsys.readouterr()
    got = json.loads(captured.out)
    assert got["test"] == test_id and got["judge"] == "teacher" and got["finished"] is True
    assert got["teacher"]["judged"] == 2 and got["teacher"]["malformed"] == 1
    assert got["result"]["judge"] == "teacher" and got["result"]["trials"] == 2
    assert "Trial 1 of 2: " in captured.err and "(right); the student's answer same" in captured.err
    assert "Trial 2 of 2: can't tell — its answer was malformed twice: stored as can't tell" in captured.err
    assert "1 answer(s) malformed twice were stored as can't tell." in captured.err
