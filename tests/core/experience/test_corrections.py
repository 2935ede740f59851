"""Corrections on a real store: validation (validate.check), offer, review (decide) and what training gets."""
from __future__ import annotations

import json

import pytest

from app.core.experience import buffer, config, corrections, validate
from app.core.experience.buffer import Recorded
from app.core.experience.corrections import CorrectionError
from app.core.experience.errors import ExperienceError

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
          "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": SCHEMA}}]
REQUEST = {"messages": [{"role": "user", "content": "show me setup.py"}], "tools": TOOLS}
BAD_CALL = '<tool_call>{"name": "read_file", "arguments": {"file": 3}}</tool_call>'


def call(name: str, arguments) -> dict:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"content": "", "tool_calls": [{"id": "c1", "type": "function",
                                           "function": {"name": name, "arguments": args}}]}


def flagged(store, exp_id: str = "e1") -> str:
    return buffer.record(store, Recorded(id=exp_id, request=REQUEST, answer={"role": "assistant", "content": BAD_CALL},
                                         finish_reason="stop"))


# validate.check


def test_a_valid_tool_call_and_a_plain_answer_pass_with_full_score():
    for answer in (call("read_file", {"path": "setup.py"}),
                   {"content": '<tool_call>{"name": "read_file", "arguments": {"path": "setup.py"}}</tool_call>'},
                   {"content": "setup.py declares the package and its dependencies."}):
        result = validate.check(REQUEST, answer, "stop", 0.7)
        assert (result.ok, result.score, result.reasons) == (True, 1.0, [])


@pytest.mark.parametrize(("answer", "finish", "says"), [
    (call("read_file", {"file": 3}), "stop", "1 of 1 tool calls invalid"),
    (call("delete_everything", {"path": "/"}), "stop", "no tool named 'delete_everything'"),
    (call("read_file", "{path: setup.py"), "stop", "the arguments are not JSON"),
    ({"content": '<tool_call>{"name": "read_file"'}, "stop", "unclosed <tool_call>"),
    ({"content": "   "}, "stop", "the answer is empty"),
    ({"content": "setup.py declares"}, "length", "ran to the token limit"),
])
def test_each_failed_hard_check_rejects_with_its_reason(answer, finish, says):
    result = validate.check(REQUEST, answer, finish, 0.0)
    assert not result.ok
    assert any(says in r for r in result.reasons), result.reasons


def test_a_loop_with_leaked_template_tokens_scores_below_the_threshold():
    answer = {"content": "I will read the file now. " * 6 + "<|im_end|>"}
    result = validate.check(REQUEST, answer, "stop", 0.7)
    assert not result.ok
    assert result.score < 0.7
    assert any("repeats itself" in r for r in result.reasons)
    assert any("<|im_end|>" in r for r in result.reasons)
    assert any("below the threshold 0.70" in r for r in result.reasons)
    assert validate.check(REQUEST, answer, "stop", 0.5).ok  # a lower threshold lets it through


def test_an_answer_that_is_not_a_message_is_rejected():
    assert validate.check(REQUEST, "just text", "stop", 0.7).ok is False  # type: ignore[arg-type]
    assert validate.check(REQUEST, {"content": "x", "tool_calls": "oops"}, "stop", 0.7).ok is False


# offer / decide / waiting / trainable


def test_an_accepted_correction_marks_the_entry_corrected_and_trains(store):
    flagged(store)
    fix = corrections.offer(store, "e1", call("read_file", {"path": "setup.py"}), teacher_model="big-teacher",
                            prompt_tokens=40, completion_tokens=10, cost=0.002)
    assert fix["state"] == "accepted" and fix["decided_by"] == "validation"
    assert fix["reason"].startswith("passed validation")
    assert buffer.get(store, "e1")["state"] == "corrected"
    [item] = corrections.trainable(store)
    assert item.experience_id == "e1" and item.correction_id == fix["id"]
    assert item.prompt == REQUEST["messages"] and item.tools == TOOLS
    assert item.chosen["tool_calls"][0]["function"]["name"] == "read_file"
    assert item.rejected == {"role": "assistant", "content": BAD_CALL}
    assert (item.teacher_model, item.source, item.cost) == ("big-teacher", "teacher", 0.002)
    assert item.created_at.endswith("+00:00")


def test_a_rejected_correction_leaves_the_entry_flagged_with_the_reason(store):
    flagged(store)
    fix = corrections.offer(store, "e1", call("read_file", {"file": 3}))
    assert fix["state"] == "rejected"
    assert "tool calls invalid" in fix["reason"]
    assert buffer.get(store, "e1")["state"] == "flagged"
    assert corrections.trainable(store) == []


def test_the_answer_is_scrubbed_before_it_is_stored(store):
    flagged(store)
    secret = "sk-proj-" + "Q" * 32
    fix = corrections.offer(store, "e1", {"content": f"Set OPENAI_API_KEY={secret} and read setup.py."},
                            source="client")
    assert secret not in json.dumps(fix)
    assert secret not in json.dumps(corrections.of(store, "e1"))
    assert "<SECRET:" in fix["answer"]["content"]


def test_with_review_required_a_correction_waits_and_trains_only_after_accept(store):
    config.set_buffer(store, "require_review", True)
    flagged(store)
    fix = corrections.offer(store, "e1", call("read_file", {"path": "setup.py"}))
    assert fix["state"] == "waiting" and fix["decided_at"] is None
    assert buffer.get(store, "e1")["state"] == "corrected"
    assert [w["id"] for w in corrections.waiting(store)] == [fix["id"]]
    assert corrections.waiting(store)[0]["experience"]["id"] == "e1"
    assert corrections.trainable(store) == []
    decided = corrections.decide(store, fix["id"], accept=True, by="cli")
    assert (decided["state"], decided["decided_by"]) == ("accepted", "cli")
    assert [t.correction_id for t in corrections.trainable(store)] == [fix["id"]]
    assert corrections.waiting(store) == []


def test_rejecting_the_last_pending_correction_flags_the_entry_again(store):
    config.set_buffer(store, "require_review", True)
    flagged(store)
    first = corrections.offer(store, "e1", {"content": "Read setup.py first."}, source="client")
    second = corrections.offer(store, "e1", call("read_file", {"path": "setup.py"}))
    corrections.decide(store, first["id"], accept=False, reason="too vague")
    assert buffer.get(store, "e1")["state"] == "corrected"  # the second still waits
    assert corrections.of(store, "e1")[0]["reason"] == "too vague"
    corrections.decide(store, second["id"], accept=False)
    assert buffer.get(store, "e1")["state"] == "flagged"
    assert corrections.of(store, "e1")[1]["reason"] == "rejected by user"


def test_deciding_a_correction_that_is_not_waiting_is_refused_with_its_state(store):
    flagged(store)
    fix = corrections.offer(store, "e1", call("read_file", {"path": "setup.py"}))
    with pytest.raises(CorrectionError, match=r"correction \d+ is accepted, not waiting for review"):
        corrections.decide(store, fix["id"], accept=False)
    with pytest.raises(CorrectionError, match="there is no correction 999"):
        corrections.decide(store, 999, accept=True)
    assert corrections.of(store, "e1")[0]["state"] == "accepted"  # nothing changed


def test_offering_for_an_unknown_entry_or_source_is_refused(store):
    with pytest.raises(ExperienceError, match="there is no experience 'nope'"):
        corrections.offer(store, "nope", {"content": "x"})
    flagged(store)
    with pytest.raises(CorrectionError, match="source"):
        corrections.offer(store, "e1", {"content": "x"}, source="oracle")
