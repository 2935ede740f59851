"""Next-action agreement and tool-call validity on hand-made cases: same tool, other tool, invalid JSON, no tool call,
close and far arguments for edits and commands, a text answer, and schema checks."""
from __future__ import annotations

import json

import pytest

from app.core.judge.nextaction import judge
from app.core.judge.report import metrics_from
from app.core.toolcalls import schemas
from app.core.toolcalls.schemas import validity

TOOLS = ["Read", "Edit", "Bash", "Grep"]
TEACHER_CALLS = [{"name": "Read", "arguments": {"file_path": "a.py"}},
                 {"name": "Edit", "arguments": {"file_path": "a.py", "old_string": "x", "new_string": "y"}},
                 {"name": "Bash", "arguments": {"command": "pytest -q"}},
                 {"name": "Grep", "arguments": {"pattern": "def", "path": "src"}}]
SCHEMAS = schemas.infer(TEACHER_CALLS)


def teacher(name: str, **arguments) -> dict:
    return {"role": "assistant", "content": "Let me see.",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]}


def student(name: str, **arguments) -> str:
    return "I will look.\n<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_the_same_tool_with_valid_arguments_agrees():
    j = judge(teacher("Read", file_path="a.py"), student("Read", file_path="b.py"), TOOLS, SCHEMAS)
    assert (j.outcome, j.agree, j.attempted, j.valid) == ("agree", True, 1, 1)


def test_another_tool_does_not_agree():
    j = judge(teacher("Read", file_path="a.py"), student("Bash", command="cat a.py"), TOOLS, SCHEMAS)
    assert (j.outcome, j.agree) == ("other_tool", False)
    assert j.valid == 1  # a valid call, just not the teacher's
    assert "Bash" in j.why[0] and "Read" in j.why[0]


def test_invalid_json_in_the_call_is_an_invalid_call():
    text = 'Reading.\n<tool_call>{"name": "Read", "arguments": {"file_path": "a.py"</tool_call>'
    j = judge(teacher("Read", file_path="a.py"), text, TOOLS, SCHEMAS)
    assert (j.outcome, j.agree, j.attempted, j.valid) == ("invalid_call", False, 1, 0)
    assert j.why[0].startswith("not JSON")


def test_no_tool_call_when_the_teacher_called_one():
    j = judge(teacher("Bash", command="pytest -q"), "The tests should pass now.", TOOLS, SCHEMAS)
    assert (j.outcome, j.agree, j.attempted, j.teacher_tool) == ("no_call", False, 0, True)


def test_an_unclosed_tag_counts_as_an_attempt_that_is_not_valid():
    j = judge(teacher("Bash", command="pytest -q"), '<tool_call>{"name": "Bash", "argu', TOOLS, SCHEMAS)
    assert (j.outcome, j.attempted, j.valid) == ("invalid_call", 1, 0)


@pytest.mark.parametrize("command,outcome", [("pytest tests/test_a.py", "agree"), ("python -m pytest -q", "other_args"),
                                             ("ls -la", "other_args"), ("cd src && pytest -x", "agree"),
                                             ("pytest  -q", "agree")])
def test_commands_agree_when_they_run_the_same_program(command, outcome):
    assert judge(teacher("Bash", command="pytest -q"), student("Bash", command=command), TOOLS, SCHEMAS).outcome \
        == outcome


def test_edits_agree_only_on_the_same_file():
    t = teacher("Edit", file_path="a.py", old_string="x", new_string="y")
    assert judge(t, student("Edit", file_path="a.py", old_string="q", new_string="r"), TOOLS, SCHEMAS).agree
    far = judge(t, student("Edit", file_path="b.py", old_string="x", new_string="y"), TOOLS, SCHEMAS)
    assert far.outcome == "other_args"


def test_arguments_that_break_the_schema_are_invalid_args():
    j = judge(teacher("Read", file_path="a.py"), student("Read", filename="a.py"), TOOLS, SCHEMAS)
    assert j.outcome == "invalid_args"
    assert j.valid == 0 and any("file_path" in w or "filename" in w for w in j.why)


def test_a_tool_that_does_not_exist_is_not_valid():
    attempted, valid, why = validity(student("Deploy", target="prod"), set(TOOLS), SCHEMAS)
    assert (attempted, valid) == (1, 0) and "no tool named 'Deploy'" in why


def test_a_text_answer_agrees_with_a_text_answer_and_not_with_a_call():
    t = {"role": "assistant", "content": "Done: the tests pass."}
    assert judge(t, "All done, tests are green.", TOOLS, SCHEMAS).outcome == "agree"
    assert judge(t, student("Bash", command="pytest"), TOOLS, SCHEMAS).outcome == "unexpected_call"
    assert judge(t, "All done, tests are green and and and", TOOLS, SCHEMAS, finished=False).outcome == "rambling"
    assert judge(t, "  ", TOOLS, SCHEMAS).outcome == "rambling"


def test_metrics_count_agreement_validity_and_tool_agreement():
    cases = [judge(teacher("Read", file_path="a.py"), student("Read", file_path="a.py"), TOOLS, SCHEMAS),
             judge(teacher("Read", file_path="a.py"), student("Bash", command="ls"), TOOLS, SCHEMAS),
             judge(teacher("Bash", command="pytest"), "<tool_call>{bad}</tool_call>", TOOLS, SCHEMAS),
             judge(teacher("Bash", command="pytest"), "no call", TOOLS, SCHEMAS)]
    metrics, outcomes, attempted, valid = metrics_from(nll_sum=8.0, tokens=4, judged=cases, rewards=[0.5, 0.1, 0, 0])
    assert metrics["loss"] == 2.0 and abs(metrics["perplexity"] - 7.389) < 1e-3
    assert metrics["agreement"] == 0.25
    assert metrics["tool_agreement"] == 0.25
    assert (attempted, valid) == (3, 2) and abs(metrics["validity"] - 2 / 3) < 1e-9
    assert metrics["reward"] == 0.15
    assert outcomes == {"agree": 1, "other_tool": 1, "invalid_call": 1, "no_call": 1}


def test_a_model_that_never_calls_a_tool_has_zero_validity_where_tools_were_wanted():
    cases = [judge(teacher("Read", file_path="a.py"), "hmm", TOOLS, SCHEMAS)]
    assert metrics_from(1.0, 1, cases, [0.0])[0]["validity"] == 0.0
    text_only = [judge({"role": "assistant", "content": "ok"}, "ok", TOOLS, SCHEMAS)]
    assert metrics_from(1.0, 1, text_only, [0.0])[0]["validity"] is None


def test_inferred_schemas_require_what_every_call_had():
    inferred = schemas.infer([{"name": "Grep", "arguments": {"pattern": "a", "path": "x"}},
                              {"name": "Grep", "arguments": {"pattern": "b", "limit": 3}}])
    grep = inferred["Grep"]
    assert grep["required"] == ["pattern"]
    assert set(grep["properties"]) == {"pattern", "path", "limit"}
    assert schemas.problems({"pattern": "c", "limit": 2.5}, grep) == []  # numbers widen
    assert schemas.problems({"limit": 1}, grep) and schemas.problems({"pattern": 1}, grep)


def test_a_call_the_answer_limit_cut_is_judged_on_what_it_decided_and_is_not_invalid():
    """The judge's answer limit cut the student's only call: the finished name and an edit's finished path decide;
    an unfinished shell command or name decides nothing (cut_call); the cut block is in neither side of validity."""
    read = teacher("Read", file_path="a.py")
    cases = {
        '<tool_call>{"name": "Read", "arguments": {"file_pa': ("agree", True),
        '<tool_call>{"name": "Bash", "arguments": {"command": "ls': ("other_tool", False),
        '<tool_call>{"name": "Re': ("cut_call", False),
        '<tool_call>': ("cut_call", False),
    }
    for text, (outcome, same) in cases.items():
        j = judge(read, text, TOOLS, SCHEMAS, finished=False)
        assert (j.outcome, j.same_tool, j.attempted, j.valid, j.cut) == (outcome, same, 0, 0, 1), text
    edit = teacher("Edit", file_path="a.py", old_string="x", new_string="y")
    same_file = '<tool_call>{"name": "Edit", "arguments": {"file_path": "a.py", "old_string": "def f(x):\\n  re'
    assert judge(edit, same_file, TOOLS, SCHEMAS, finished=False).outcome == "agree"
    assert judge(edit, same_file.replace("a.py", "b.py"), TOOLS, SCHEMAS, finished=False).outcome == "other_args"
    assert judge(edit, '<tool_call>{"name": "Edit", "arguments": {"file_path": "a.p', TOOLS, SCHEMAS,
                 finished=False).outcome == "cut_call"
    bash = teacher("Bash", command="pytest -q")
    assert judge(bash, '<tool_call>{"name": "Bash", "arguments": {"command": "pytest -q"', TOOLS, SCHEMAS,
                 finished=False).outcome == "cut_call"  # a command is never judged unfinished
    # a finished call before the cut one decides, and only the finished one counts for validity
    both = student("Read", file_path="a.py") + '<tool_call>{"name": "Bash", "arguments": {"comm'
    j = judge(read, both, TOOLS, SCHEMAS, finished=False)
    assert (j.outcome, j.attempted, j.valid, j.cut) == ("agree", 1, 1, 1)
    # the same unclosed block in an answer that ended by itself is a call that does not parse
    j = judge(read, '<tool_call>{"name": "Read", "arguments": {"file_pa', TOOLS, SCHEMAS, finished=True)
    assert (j.outcome, j.attempted, j.valid) == ("invalid_call", 1, 0)
    # teacher answered in text: a cut call is still a call where the teacher answered, not an invalid one
    j = judge({"role": "assistant", "content": "Done."}, '<tool_call>{"name": "Re', TOOLS, SCHEMAS, finished=False)
    assert (j.outcome, j.attempted, j.cut) == ("unexpected_call", 0, 1)


def test_validity_has_no_evidence_when_every_call_was_cut():
    cut = judge(teacher("Read", file_path="a.py"), '<tool_call>{"name": "Read"', TOOLS, SCHEMAS, finished=False)
    metrics, outcomes, attempted, valid = metrics_from(nll_sum=1.0, tokens=1, judged=[cut], rewards=[0.5])
    assert metrics["validity"] is None and metrics["tool_agreement"] == 1.0 and (attempted, valid) == (0, 0)
    assert outcomes == {"agree": 1}


def test_a_cut_todo_list_agrees_by_its_name_as_a_finished_one_does():
    todo = {"role": "assistant", "content": '<tool_call>{"name": "TodoWrite", "arguments": {"todos": []}}</tool_call>'}
    cut = '<tool_call>{"name": "TodoWrite", "arguments": {"todos": [{"content": "Add the CSS'
    assert judge(todo, cut, TOOLS + ["TodoWrite"], None, finished=False).outcome == "agree"


def test_a_call_that_ends_repeating_itself_is_a_loop_not_cut_and_stays_invalid():
    bash = teacher("Bash", command="make")
    loop = '<tool_call>{"name": "Bash", "arguments": {"command": "make' + " -D lib" * 12
    j = judge(bash, loop, TOOLS, SCHEMAS, finished=False)
    assert (j.outcome, j.attempted, j.valid, j.cut) == ("invalid_call", 1, 0, 0)
    long_edit = '<tool_call>{"name": "Bash", "arguments": {"command": "make -D lib -D lib -D lib && ./configure --x'
    assert judge(bash, long_edit, TOOLS, SCHEMAS, finished=False).outcome == "cut_call"
