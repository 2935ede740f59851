"""The behavioural reward: each component on real completions (valid/malformed calls, teacher match, reasoning depth,
recovery after an error, exploration), the weighted total, RewardContext from chat messages, and the TRL adapters."""
from __future__ import annotations

import json
import pickle

import pytest

from app.core.datasets.convert import system_message
from app.core.judge.reward_context import exploration_level, is_error_result
from app.core.judge.reward_parts import (
    NEUTRAL_SELF_CORRECTION,
    constraint_adherence,
    exploration_fit,
    reasoning_depth,
    reasoning_fit,
    reasoning_steps,
    self_correction,
    split_thinking,
    tool_efficiency,
)
from app.core.judge.rewards import (
    DEFAULT_WEIGHTS,
    Breakdown,
    RewardContext,
    completion_text,
    normalise_weights,
    reward_constraint,
    score,
    trl_reward_funcs,
    trl_reward_weights,
)
from app.core.toolcalls.actions import is_exploratory
from app.core.toolcalls.convention import tools_in_system

TOOLS = ["Bash", "Edit", "Glob", "Grep", "Read"]


def tc(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def call(name: str, id_: str = "c1", **arguments) -> dict:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


def ctx(*teacher_calls: dict, **kw) -> RewardContext:
    return RewardContext(tools=kw.pop("tools", TOOLS), teacher_calls=list(teacher_calls), **kw)


READ_A = {"name": "Read", "arguments": {"file_path": "a.py"}}


# --- constraint adherence -----------------------------------------------------------------------------------------

def test_valid_known_calls_adhere_fully():
    c = ctx(READ_A, seen_paths=["a.py"])
    assert constraint_adherence("Let me look.\n" + tc("Read", file_path="a.py"), c) == 1.0
    assert constraint_adherence("The tests pass now.", c) == 1.0  # a text answer breaks no rule
    assert constraint_adherence("   ", c) == 0.0


@pytest.mark.parametrize("block", [
    '<tool_call>{"name": "Read", "arguments": {"file_path": </tool_call>',  # bad JSON
    '<tool_call>{"arguments": {"file_path": "a.py"}}</tool_call>',  # no name
    '<tool_call>{"name": "", "arguments": {}}</tool_call>',  # empty name
    '<tool_call>{"name": "Read", "arguments": ["a.py"]}</tool_call>',  # arguments not an object
    '<tool_call>{"name": "Read", "arguments": {"file_path": "a.py"}}',  # never closed
    '<tool_call>{"name": "Delete", "arguments": {"file_path": "a.py"}}</tool_call>',  # not an available tool
])
def test_malformed_or_unknown_blocks_count_against(block):
    c = ctx(READ_A)
    assert constraint_adherence(block, c) == 0.0
    assert constraint_adherence(tc("Read", file_path="a.py") + "\n" + block, c) == pytest.approx(0.5)


def test_unknown_tools_pass_when_the_tool_list_is_unknown():
    block = tc("Delete", file_path="a.py")
    assert constraint_adherence(block, ctx(tools=[])) == 1.0
    assert constraint_adherence(block, ctx()) == 0.0


def test_structure_rules_of_a_turn():
    good = "<think>Read it first.</think>" + tc("Read", file_path="a.py")
    assert constraint_adherence(good, ctx()) == 1.0
    assert constraint_adherence("<think>Read it first." + tc("Read", file_path="a.py"), ctx()) == 0.75  # unclosed
    invented = tc("Read", file_path="a.py") + "\n<tool_response>print('hi')</tool_response>"
    assert constraint_adherence(invented, ctx()) == 0.25  # invented result (0.5) + text after the call (0.25)
    assert constraint_adherence(tc("Read", file_path="a.py") + "\nThe file prints hi.", ctx()) == 0.75


def test_editing_a_file_never_read_breaks_look_before_you_change():
    edit = tc("Edit", file_path="b.py", old_string="x", new_string="y")
    assert constraint_adherence(edit, ctx(seen_paths=["a.py"])) == 0.75
    assert constraint_adherence(edit, ctx(seen_paths=["b.py"])) == 1.0
    assert constraint_adherence(tc("Read", file_path="b.py") + edit, ctx()) == 1.0  # read in this very step
    teacher_edits_it = {"name": "Edit", "arguments": {"file_path": "b.py", "old_string": "x", "new_string": "z"}}
    assert constraint_adherence(edit, ctx(teacher_edits_it)) == 1.0  # its read lies before the window


# --- tool efficiency ----------------------------------------------------------------------------------------------

def test_matching_the_teacher_beats_the_right_tool_beats_the_wrong_tool():
    c = ctx(READ_A)
    exact = tool_efficiency(tc("Read", file_path="a.py"), c)
    same_tool = tool_efficiency(tc("Read", file_path="b.py"), c)
    wrong = tool_efficiency(tc("Grep", pattern="x"), c)
    assert exact == 1.0 and same_tool == pytest.approx(0.7) and wrong == 0.0
    assert tool_efficiency("I think a.py is fine.", c) == 0.0  # the teacher acted, the student did not


def test_arguments_match_after_normalisation():
    c = ctx({"name": "Bash", "arguments": {"command": "pytest -q", "timeout": 60}})
    same = '<tool_call>{"name": "Bash", "arguments": {"timeout": 60.0, "command": " pytest -q "}}</tool_call>'
    assert tool_efficiency(same, c) == 1.0


def test_duplicates_and_extra_calls_cost():
    c = ctx(READ_A)
    once = tool_efficiency(tc("Read", file_path="a.py"), c)
    extra = tool_efficiency(tc("Read", file_path="a.py") + tc("Read", file_path="b.py"), c)
    twice = tool_efficiency(tc("Read", file_path="a.py") * 2, c)
    assert once > extra > twice
    assert extra == pytest.approx(0.85) and twice == pytest.approx(0.6)


def test_when_the_teacher_answered_in_text_a_text_answer_wins():
    c = ctx(teacher_text="All 12 tests pass.")
    assert tool_efficiency("All tests pass now.", c) == 1.0
    assert tool_efficiency("<think>they pass</think>", c) == 0.5
    assert tool_efficiency(tc("Bash", command="pytest"), c) == 0.0
    assert tool_efficiency("", c) == 0.0


# --- reasoning depth ----------------------------------------------------------------------------------------------

DEEP = ("<think>First, I must check the config before touching the parser. Then I read parser.py because the "
        "traceback points there. Skipping the tests folder since it only has fixtures. Next I fix the off-by-one "
        "in the loop.</think>" + tc("Read", file_path="parser.py"))


def test_deep_reasoning_beats_shallow_beats_none():
    deep = reasoning_depth(DEEP, ctx())
    shallow = reasoning_depth("I will read the parser." + tc("Read", file_path="parser.py"), ctx())
    assert deep == 1.0 and shallow == pytest.approx(0.125)
    assert reasoning_depth(tc("Read", file_path="parser.py"), ctx()) == 0.0
    assert reasoning_depth("", ctx()) == 0.0


def test_reasoning_fits_the_teachers_amount_at_this_step():
    plain = ctx(READ_A, teacher_text="Reading the config.")  # the teacher wrote one line (half a step)
    planned = ctx(READ_A, teacher_text=split_thinking(DEEP)[0])  # the teacher planned: 4 steps
    assert reasoning_steps(planned.teacher_text) == 4.0
    one_line = "I will read the parser." + tc("Read", file_path="parser.py")
    assert reasoning_fit(one_line, plain) == 1.0
    assert reasoning_fit(tc("Read", file_path="parser.py"), plain) == pytest.approx(0.875)  # a line less costs little
    assert reasoning_fit(DEEP, plain) == pytest.approx(0.125)  # a ramble before a plain action
    assert reasoning_fit(DEEP, planned) == 1.0
    assert reasoning_fit(tc("Read", file_path="parser.py"), planned) == 0.0  # silence before a considered action
    assert reasoning_fit(one_line, planned) == pytest.approx(0.125)
    assert reasoning_fit("\n".join([split_thinking(DEEP)[0]] * 3), planned) == 1.0  # repeats add no step
    # the old part ranked the ramble above the teacher's own line; the part in the reward does not
    assert reasoning_depth(DEEP, plain) > reasoning_depth(one_line, plain)
    assert score(one_line, plain).reasoning > score(DEEP, plain).reasoning


def test_repeating_a_sentence_adds_nothing():
    one = "First I must read the parser before editing it."
    assert reasoning_steps(one) == 1.0
    assert reasoning_steps(" ".join([one] * 8)) == 1.0
    assert reasoning_steps("\n".join(f"- {one}" for _ in range(5))) == 1.0  # bullets do not make it new
    assert reasoning_steps("First. Then. So. Because.") == 0.0  # markers without content are no steps


def test_prose_outside_think_counts_and_tool_json_and_code_do_not():
    prose = "The test fails because the loop stops early. So I will change the range."
    assert reasoning_steps(prose) == 2.0
    noise = tc("Bash", command="echo first then because so") + "\n```\nfor i in range(n): then = because\n```"
    assert reasoning_steps(noise) == 0.0


def test_lone_closing_think_tag_marks_thinking_opened_by_the_template():
    thinking, visible = split_thinking("I must read it first.\n</think>\nReading.")
    assert thinking.strip() == "I must read it first." and visible.strip() == "Reading."


# --- self-correction ----------------------------------------------------------------------------------------------

FAILED = {"name": "Bash", "arguments": {"command": "pytest tests/test_parse.py"}}
AFTER_ERROR = dict(after_error=True, failed_call=FAILED,
                   error_text="ERROR: file or directory not found: tests/test_parse.py")


def test_after_an_error_a_diagnosed_changed_retry_beats_an_identical_retry():
    c = ctx(**AFTER_ERROR)
    diagnosed = ("Actually the error says tests/test_parse.py does not exist; the file is tests/test_parser.py."
                 + tc("Bash", command="pytest tests/test_parser.py"))
    changed_only = tc("Bash", command="pytest tests/test_parser.py")
    identical = "Actually, let me fix that. " + tc("Bash", command="pytest tests/test_parse.py")
    assert self_correction(diagnosed, c) == pytest.approx(1.0)
    assert self_correction(changed_only, c) == pytest.approx(0.4)
    assert self_correction(identical, c) == 0.0
    assert self_correction("Let me fix the path, that was wrong.", c) == pytest.approx(0.55)  # text only


def test_identical_retry_is_caught_after_argument_normalisation():
    c = ctx(**AFTER_ERROR)
    retry = '<tool_call>{"name": "Bash", "arguments": {"command": "  pytest tests/test_parse.py"}}</tool_call>'
    assert self_correction(retry, c) == 0.0


def test_without_an_error_self_correction_is_neutral_and_spam_earns_nothing():
    c = ctx(READ_A)
    plain = self_correction(tc("Read", file_path="a.py"), c)
    spam = self_correction("Actually, wait, oops, my mistake, actually. " + tc("Read", file_path="a.py"), c)
    assert plain == spam == NEUTRAL_SELF_CORRECTION


# --- exploration fit ----------------------------------------------------------------------------------------------

def test_exploration_matches_the_teachers_amount():
    two_reads = ctx(READ_A, {"name": "Grep", "arguments": {"pattern": "def parse"}})
    assert two_reads.teacher_exploration == 2
    assert exploration_fit(tc("Read", file_path="x.py") + tc("Glob", pattern="*.py"), two_reads) == 1.0
    assert exploration_fit(tc("Read", file_path="x.py"), two_reads) == 0.5
    assert exploration_fit(tc("Edit", file_path="x.py"), two_reads) == 0.0
    acts = ctx({"name": "Edit", "arguments": {"file_path": "a.py"}})
    assert exploration_fit(tc("Edit", file_path="a.py"), acts) == 1.0
    assert exploration_fit(tc("Read", file_path="a.py") + tc("Grep", pattern="x"), acts) == 0.0


@pytest.mark.parametrize("name,arguments,expected", [
    ("Read", {}, True), ("LS", {}, True), ("WebFetch", {}, True), ("read_many_files", {}, True),
    ("list_directory", {}, True), ("grep_search", {}, True), ("search_replace", {}, False), ("Edit", {}, False),
    ("TodoWrite", {}, False), ("tools_status", {}, False), ("Bash", {"command": "ls -la && git status"}, True),
    ("Bash", {"command": "cat > a.py <<EOF"}, False), ("Bash", {"command": "pytest -q"}, False),
    ("shell", {"command": ["bash", "-lc", "rg parse src | head"]}, True),
])
def test_exploratory_calls(name, arguments, expected):
    assert is_exploratory({"name": name, "arguments": arguments}) is expected


def test_exploration_levels():
    assert [exploration_level(n) for n in (0, 1, 2, 3, 4, 9)] == ["minimal"] * 2 + ["moderate"] * 2 + ["thorough"] * 2


# --- the weighted total -------------------------------------------------------------------------------------------

def test_weights_are_normalised_and_change_the_total_the_right_way():
    c = ctx(READ_A, teacher_text=split_thinking(DEEP)[0])  # a teacher that planned before its read
    shallow_exact = tc("Read", file_path="a.py")  # efficient, no reasoning
    deep_wrong = DEEP.replace("parser.py", "b.py").replace(tc("Read", file_path="b.py"), tc("Grep", pattern="x"))
    assert score(shallow_exact, c).efficiency > score(deep_wrong, c).efficiency
    assert score(shallow_exact, c).reasoning < score(deep_wrong, c).reasoning
    assert score(shallow_exact, c).total == pytest.approx(score(deep_wrong, c).total)  # 0.20 each by default
    favour_efficiency, favour_reasoning = {"efficiency": 0.5}, {"reasoning": 0.5}
    assert score(shallow_exact, c, favour_efficiency).total > score(deep_wrong, c, favour_efficiency).total
    assert score(shallow_exact, c, favour_reasoning).total < score(deep_wrong, c, favour_reasoning).total
    assert sum(normalise_weights({"reasoning": 2}).values()) == pytest.approx(1.0)
    assert normalise_weights({k: 2 * v for k, v in DEFAULT_WEIGHTS.items()}) == pytest.approx(DEFAULT_WEIGHTS)


def test_breakdown_total_is_the_weighted_sum():
    b = score(DEEP, ctx(READ_A))
    assert isinstance(b, Breakdown)
    parts = {k: v for k, v in b.as_dict().items() if k != "total"}
    assert b.total == pytest.approx(sum(DEFAULT_WEIGHTS[k] * v for k, v in parts.items()))
    only = score(DEEP, ctx(READ_A), {k: 0 for k in DEFAULT_WEIGHTS} | {"reasoning": 1})
    assert only.total == pytest.approx(only.reasoning)


@pytest.mark.parametrize("weights,message", [
    ({"constraints": 1}, "unknown reward weight"), ({"reasoning": -0.1}, ">= 0"),
    ({"reasoning": float("nan")}, ">= 0"), ({k: 0 for k in DEFAULT_WEIGHTS}, "all zero"),
])
def test_bad_weights_are_refused(weights, message):
    with pytest.raises(ValueError, match=message):
        score("hi", ctx(), weights)


# --- RewardContext from chat messages -----------------------------------------------------------------------------

def realistic_context() -> tuple[list[dict], dict]:
    context = [
        system_message(TOOLS),
        {"role": "user", "content": "The parser test fails, fix it."},
        {"role": "assistant", "content": "<think>Run the test first.</think>",
         "tool_calls": [call("Read", "t1", file_path="src/parser.py"),
                        call("Bash", "t2", command="pytest tests/test_parse.py")]},
        {"role": "tool", "tool_call_id": "t1", "name": "Read", "content": "def parse(s):\n    raise ValueError"},
        {"role": "tool", "tool_call_id": "t2", "name": "Bash",
         "content": "[error] Exit code 4\nERROR: file or directory not found: tests/test_parse.py"},
    ]
    teacher = {"role": "assistant", "content": "The test file is test_parser.py.",
               "tool_calls": [call("Glob", "t3", pattern="tests/test_pars*.py")]}
    return context, teacher


def test_from_messages_reads_tools_teacher_and_the_failure():
    context, teacher = realistic_context()
    c = RewardContext.from_messages(context, teacher)
    assert c.tools == TOOLS
    assert c.teacher_calls == [{"name": "Glob", "arguments": {"pattern": "tests/test_pars*.py"}}]
    assert c.teacher_text == "The test file is test_parser.py." and c.teacher_exploration == 1
    assert c.after_error and c.failed_call == {"name": "Bash", "arguments": {"command": "pytest tests/test_parse.py"}}
    assert "not found" in c.error_text and c.seen_paths == ["src/parser.py"]
    given = [{"type": "function", "function": {"name": "X"}}]
    assert RewardContext.from_messages(context, teacher, tools=given).tools == ["X"]


def test_from_messages_without_a_trailing_error():
    context, teacher = realistic_context()
    context[-1] = {**context[-1], "content": "2 passed"}
    assert not RewardContext.from_messages(context, teacher).after_error
    context += [{"role": "tool", "content": "Error: boom", "is_error": True}, {"role": "user", "content": "go on"}]
    assert not RewardContext.from_messages(context, teacher).after_error  # the user spoke after the error
    text_teacher = RewardContext.from_messages(context[:2], {"role": "assistant", "content": "Done."})
    assert text_teacher.teacher_calls == [] and text_teacher.teacher_text == "Done." and not text_teacher.after_error


@pytest.mark.parametrize("content,expected", [
    ("[error] boom", True), ("<tool_use_error>File has not been read yet</tool_use_error>", True),
    ("Error: no such module", True), ("Traceback (most recent call last):\n  File x", True),
    ("Exit code 1\nfailed", True), ("bash: foo: command not found", True), ('{"exit_code": 2}', True),
    ("def handle_error(e):\n    raise ValueError", False), ("error.py:3: def f()", False), ("2 passed", False),
])
def test_error_results(content, expected):
    assert is_error_result({"role": "tool", "content": content}) is expected


def test_tools_from_a_hermes_tools_block():
    system = ('You may call tools.\n<tools>\n{"type": "function", "function": {"name": "read_file", "parameters": '
              '{"properties": {"name": {"type": "string"}}}}}\n{"type": "function", "function": {"name": "shell"}}\n'
              '</tools>')
    assert tools_in_system(system) == ["read_file", "shell"]
    assert tools_in_system("You are helpful.") == []


def test_row_round_trip_as_dict_and_json():
    context, teacher = realistic_context()
    c = RewardContext.from_messages(context, teacher)
    assert RewardContext.from_row(c.to_row()) == c
    assert RewardContext.from_row(json.dumps(c.to_row())) == c
    assert RewardContext.from_row({"teacher_calls": [READ_A], "future_field": 1}).teacher_exploration == 1


# --- TRL adapters ---------------------------------------------------------------------------------------------------

def test_trl_functions_take_strings_and_conversational_completions_with_the_context_column():
    c = ctx(READ_A, seen_paths=["a.py"])
    column = [json.dumps(c.to_row()), c.to_row()]
    text = "I must read a.py first because it holds the bug. " + tc("Read", file_path="a.py")
    convo = [{"role": "assistant", "content": "I must read a.py first because it holds the bug.",
              "tool_calls": [{"type": "function", "function": {"name": "Read", "arguments": {"file_path": "a.py"}}}]}]
    funcs = trl_reward_funcs()
    assert [f.__name__ for f in funcs] == ["reward_constraint", "reward_reasoning", "reward_efficiency",
                                           "reward_self_correction", "reward_exploration"]
    assert trl_reward_weights() == pytest.approx(list(DEFAULT_WEIGHTS.values()))
    expected = score(text, c).as_dict()
    for f, key in zip(funcs, DEFAULT_WEIGHTS):
        as_text = f(prompts=["p", "p"], completions=[text, text], reward_context=column, completion_ids=[[1], [2]],
                    trainer_state=None, log_extra=None, log_metric=None)
        as_messages = f(prompts=[[], []], completions=[convo, convo], reward_context=column)
        assert as_text == as_messages == pytest.approx([expected[key]] * 2), key


def test_trl_weights_drop_zero_components_and_stay_aligned():
    w = {"self_correction": 0, "reasoning": 0.4}
    names = [f.__name__ for f in trl_reward_funcs(w)]
    assert "reward_self_correction" not in names and len(names) == len(trl_reward_weights(w)) == 4
    assert sum(trl_reward_weights(w)) == pytest.approx(1.0)
    assert trl_reward_weights(w)[names.index("reward_reasoning")] == pytest.approx(0.4 / 1.05)


def test_trl_functions_are_picklable_and_need_the_context_column():
    assert pickle.loads(pickle.dumps(reward_constraint)) is reward_constraint
    with pytest.raises(ValueError, match="reward_context"):
        reward_constraint(prompts=["p"], completions=["x"])


def test_completion_text_keeps_assistant_turns_only():
    convo = [{"role": "assistant", "content": "Reading.", "tool_calls": [call("Read", file_path="a.py")]},
             {"role": "tool", "content": "print(1)"}, {"role": "assistant", "content": "Done."}]
    assert completion_text(convo) == 'Reading.\n<tool_call>{"name": "Read", "arguments": {"file_path": "a.py"}}' \
                                     '</tool_call>\nDone.'
    assert completion_text("plain") == "plain"
