"""Preference pairs, the pure part: reading the student's answer, agreement with the teacher, teacher contexts (train
split only, stable when the source is rebuilt), the records, and a build with a scripted student."""
from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from pathlib import Path

import pytest

from app.core.datafiles.formats import SPECS, record_problem
from app.core.datasets import manifest as manifests
from app.core.datasets.builder import BuildError
from app.core.datasets.catalog import Registry
from app.core.datasets.pairs import (
    PairsConfig,
    build,
    conversational,
    pair_record,
    plan,
    teacher_contexts,
    train_records,
)
from app.core.toolcalls.agreement import exact_agreement as agrees
from app.core.toolcalls.convention import as_text, parse_student
from engine.chat_template import tool_calls_as_text
from tests.conftest import write_jsonl

SYSTEM = {"role": "system", "content": "You are a coding agent."}


def call(name: str, arguments, id_: str = "c1") -> dict:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


def assistant(content: str = "", *calls: dict) -> dict:
    msg = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = list(calls)
    return msg


# --- parse_student ------------------------------------------------------------------------------------------------

def test_plain_text_is_a_text_answer():
    assert parse_student("  Paris is the capital.\n") == {"role": "assistant", "content": "Paris is the capital."}


def test_hermes_tool_calls_become_tool_calls_and_the_text_stays():
    text = ('Let me look.\n<tool_call>{"name": "Read", "arguments": {"path": "a.py"}}</tool_call>\n'
            '<tool_call>\n{"name": "Bash", "arguments": "{\\"command\\": \\"ls\\"}"}\n</tool_call>')
    msg = parse_student(text)
    assert msg["content"] == "Let me look."
    assert [c["function"] for c in msg["tool_calls"]] == [{"name": "Read", "arguments": {"path": "a.py"}},
                                                          {"name": "Bash", "arguments": {"command": "ls"}}]
    assert [c["id"] for c in msg["tool_calls"]] == ["call_0", "call_1"]
    assert all(c["type"] == "function" for c in msg["tool_calls"])


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "Read", "arguments": {"path": </tool_call>',  # malformed JSON
    '<tool_call>{"arguments": {"path": "a.py"}}</tool_call>',  # no name
    '<tool_call>["Read"]</tool_call>',  # not an object
    '<tool_call>{"name": "Read", "arguments": {"path": "a.py"}}',  # cut off before the closing tag
])
def test_anything_malformed_stays_text(text):
    assert parse_student(text) == {"role": "assistant", "content": text}


def test_parameters_and_missing_arguments_are_read():
    msg = parse_student('<tool_call>{"name": "Glob", "parameters": {"pattern": "*.py"}}</tool_call>'
                        '<tool_call>{"name": "Stop"}</tool_call>')
    assert [c["function"] for c in msg["tool_calls"]] == [{"name": "Glob", "arguments": {"pattern": "*.py"}},
                                                          {"name": "Stop", "arguments": {}}]
    assert msg["content"] == ""


def test_as_text_is_the_renderers_hermes_text_and_parses_back():
    teacher = assistant("<think>\nfirst look\n</think>\nReading.", call("Read", {"path": "ü.py", "limit": 5}),
                        call("Bash", '{"command": "ls"}', "c2"))
    assert as_text(teacher) == tool_calls_as_text(teacher)
    back = parse_student(as_text(teacher)["content"])
    assert back["content"] == teacher["content"] and agrees(teacher, back)
    assert as_text({"role": "tool", "content": "ok", "tool_call_id": "c1"}) == {"role": "tool", "content": "ok"}


# --- agrees -------------------------------------------------------------------------------------------------------

def test_the_same_tool_calls_agree_whatever_their_encoding_and_the_text_around_them():
    teacher = assistant("I will read it.", call("Read", {"path": "a.py", "opts": {"limit": 5, "offset": 0}}))
    student = parse_student('Reading now <tool_call>{"name": "Read", "arguments": '
                            '"{\\"opts\\": {\\"offset\\": 0.0, \\"limit\\": 5}, \\"path\\": \\" a.py\\"}"}'
                            '</tool_call>')
    assert agrees(teacher, student)


@pytest.mark.parametrize("student", [
    assistant("", call("Read", {"path": "b.py"})),  # other arguments
    assistant("", call("Write", {"path": "a.py"})),  # other tool
    assistant("", call("Read", {"path": "a.py"}), call("Bash", {"command": "ls"})),  # one call more
    assistant("I will read a.py."),  # words instead of the call
])
def test_other_tool_calls_disagree(student):
    assert not agrees(assistant("", call("Read", {"path": "a.py"})), student)


def test_calls_in_another_order_disagree():
    a, b = call("Read", {"path": "a.py"}), call("Bash", {"command": "ls"})
    assert not agrees(assistant("", a, b), assistant("", b, a))
    assert agrees(assistant("", a, b), assistant("x", a, b))


def test_text_answers_agree_on_whitespace_and_near_identity_only():
    teacher = assistant("The tests pass now.\nThe bug was an off-by-one in parse().")
    assert agrees(teacher, assistant("The tests  pass now. The bug was an off-by-one in parse()."))
    assert agrees(teacher, assistant("The tests pass now. The bug was an off by one in parse()!"))  # ratio >= 0.9
    assert not agrees(teacher, assistant("The tests still fail; I will look at parse() again."))
    assert not agrees(teacher, assistant(""))
    assert not agrees(teacher, assistant("", call("Bash", {"command": "pytest"})))


def test_thinking_is_set_aside_when_there_is_an_answer():
    teacher = assistant("<think>\nThe user wants a short answer.\n</think>\nDone: the file is fixed.")
    assert agrees(teacher, assistant("Done: the file is fixed."))
    assert agrees(teacher, assistant("<think>something else entirely</think> Done: the file is fixed."))
    only = assistant("<think>hmm</think>")
    assert agrees(only, assistant("<think> hmm </think>")) and not agrees(only, assistant("<think>no</think>"))


# --- teacher contexts ---------------------------------------------------------------------------------------------

def example(session: str, n: int, example_id: str | None = None, **extra) -> dict:
    """A train example: system, the request, then n tool-calling steps and a final answer."""
    msgs = [SYSTEM, {"role": "user", "content": f"Fix the bug in {session}."}]
    for i in range(n):
        msgs += [assistant(f"step {i}", call("Read", {"path": f"{session}/{i}.py"}, f"c{i}")),
                 {"role": "tool", "tool_call_id": f"c{i}", "name": "Read", "content": f"contents {i}"}]
    msgs.append(assistant(f"Fixed {session}."))
    return {"id": example_id or manifests.example_id(msgs, "template-a"), "session_id": session, "window": 0,
            "messages": msgs, **extra}


def test_every_assistant_message_of_a_train_example_is_a_context_once():
    records = [example("s1", 2), example("s2", 0)]
    found = teacher_contexts(records + [records[0]], max_contexts=100)  # a replayed copy counts once
    assert [(c.session_id, c.turn) for c in found] == [("s1", 2), ("s1", 4), ("s1", 6), ("s2", 2)]
    first = found[0]
    assert first.messages == records[0]["messages"][:2] and first.teacher == records[0]["messages"][2]
    assert first.example_id == records[0]["id"]
    assert all(c.teacher["role"] == "assistant" for c in found)


def test_an_action_repeated_by_overlapping_windows_keeps_its_longest_context():
    whole = example("s1", 3)["messages"]  # header (2) + 3 blocks of (assistant, tool) + the final answer
    header, blocks = whole[:2], [whole[2:4], whole[4:6], whole[6:8]]
    first = {"id": "w0", "session_id": "s1", "messages": header + blocks[0] + blocks[1]}
    second = {"id": "w1", "session_id": "s1", "messages": header + blocks[1] + blocks[2] + whole[8:]}  # carries b1
    found = teacher_contexts([first, second], 100)
    assert [(c.example_id, c.turn) for c in found] == [("w0", 2), ("w0", 4), ("w1", 4), ("w1", 6)]
    assert [c.teacher for c in found] == [whole[2], whole[4], whole[6], whole[8]]  # each action once
    assert found[1].messages == whole[:4]  # seen after the block before it, not after the header alone


def test_val_and_test_records_are_never_contexts():
    records = [example("s1", 1), example("s2", 1, split="val"), example("s3", 1, split="test"),
               example("s4", 1, split="train")]
    assert {c.session_id for c in teacher_contexts(records, 100)} == {"s1", "s4"}


def test_a_capped_selection_is_stable_when_the_source_is_rebuilt():
    records = [example(f"s{i}", i % 4) for i in range(30)]
    chosen = teacher_contexts(records, max_contexts=10, seed=3)
    assert len(chosen) == 10
    rebuilt = [example(f"s{i}", i % 4, example_id=f"other-template-{i}") for i in range(30)]  # new example ids
    random.Random(1).shuffle(rebuilt)
    again = teacher_contexts(rebuilt, max_contexts=10, seed=3)
    assert [c.key for c in again] == [c.key for c in chosen]
    every = {c.key for c in teacher_contexts(records, 1000)}
    assert {c.key for c in chosen} < every
    assert {c.key for c in teacher_contexts(records, 10, seed=4)} != {c.key for c in chosen}


def built_sft(store, tmp_path: Path, name: str, by_split: dict[str, list[dict]], base_model: str = "m") -> Path:
    """An SFT dataset folder as the builder writes it, registered."""
    folder = tmp_path / name
    folder.mkdir()
    for split, file in manifests.SPLIT_FILES.items():
        write_jsonl(folder / file, by_split.get(split, []))
    uses = [manifests.SessionUse(id=r["session_id"], split=s, examples=1, content_sha256="c" * 64)
            for s, recs in by_split.items() for r in recs]
    man = manifests.Manifest(name=name, base_model=base_model, template_sha256="t" * 64,
                     created_at=datetime.now(timezone.utc).isoformat(),
                     fingerprint=manifests.fingerprint({s: [r["id"] for r in recs] for s, recs in by_split.items()}, "t"),
                     splits={s: manifests.SplitSize(examples=len(r)) for s, r in by_split.items()}, sessions=uses)
    Registry(store).register(folder, manifests.write(folder, man))
    return Path(Registry(store).get(name).path)


def test_train_records_read_the_train_split_of_train_sessions_only(store, tmp_path):
    folder = built_sft(store, tmp_path, "sft-a", {"train": [example("s1", 1), example("s2", 1)],
                                                  "val": [example("s3", 1)], "test": [example("s4", 1)]})
    assert {r["session_id"] for r in train_records(folder)} == {"s1", "s2"}
    assert {r["session_id"] for r in train_records(folder, heldout=frozenset({"s2"}))} == {"s1"}
    # a train file that holds what it should not (a val session, an unknown one) and a replayed example
    tampered = built_sft(store, tmp_path, "sft-b", {"train": [example("s1", 0)], "val": [example("s3", 0)]})
    tampered.joinpath("train.jsonl").chmod(0o644)
    write_jsonl(tampered / "train.jsonl", [example("s1", 0), example("s3", 0), example("s9", 0),
                                           example("s8", 0, source="replay")])
    assert [r["session_id"] for r in train_records(tampered)] == ["s1", "s8"]
    assert [r["session_id"] for r in train_records(tampered, heldout=frozenset({"s8"}))] == ["s1"]
    with pytest.raises(BuildError, match="does not match its manifest"):  # and a pairs build refuses it
        plan(store, PairsConfig(base_model="m", source="sft-b"))


# --- records and a build with a scripted student ------------------------------------------------------------------

def test_a_pair_record_is_preference_v1_in_conversational_hermes_text():
    ctx = example("s1", 1)["messages"]
    rec = pair_record(ctx[:2], ctx[2], parse_student("I give up."), session_id="s1", example_id="e1", turn=2)
    assert record_problem(SPECS["preference_v1"], rec) is None
    assert rec["prompt"] == [as_text(m) for m in ctx[:2]]
    assert rec["chosen"] == [{"role": "assistant", "content":
                              'step 0\n<tool_call>{"name": "Read", "arguments": {"path": "s1/0.py"}}</tool_call>'}]
    assert rec["rejected"] == [{"role": "assistant", "content": "I give up."}]
    assert (rec["source"], rec["session_id"], rec["example_id"], rec["turn"], rec["truncated"], rec["file_sha256"]) \
        == ("student", "s1", "e1", 2, False, "")
    dropped = conversational({"prompt": "Hi?", "chosen": "Hello.", "rejected": [assistant("", call("Bash", {}))]},
                             "f" * 64)
    assert list(dropped) == list(rec)  # the same fields in every record: one table for any loader
    assert record_problem(SPECS["preference_v1"], dropped) is None
    assert (dropped["source"], dropped["turn"], dropped["file_sha256"]) == ("dropped", None, "f" * 64)
    assert dropped["prompt"] == [{"role": "user", "content": "Hi?"}]
    assert dropped["rejected"] == [{"role": "assistant",
                                    "content": '<tool_call>{"name": "Bash", "arguments": {}}</tool_call>'}]
    again = pair_record(ctx[:2], ctx[2], parse_student("I give up."), session_id="s1", example_id="e1", turn=2)
    assert again["id"] == rec["id"] and len(rec["id"]) == 24


class Scripted:
    """A student that answers from a script: context turn -> raw text."""

    label, template_sha256 = "scripted", "s" * 64

    def __init__(self, answers: dict[tuple[str, int], str]) -> None:
        self.answers, self.asked = answers, []

    def generate(self, messages: list[dict]) -> tuple[str, bool]:
        key = (messages[1]["content"].split()[-1].rstrip("."), len(messages))
        self.asked.append(key)
        answer = self.answers[key]
        return answer.rstrip("…"), not answer.endswith("…")  # "…": cut at max_new_tokens

    def count(self, messages: list[dict]) -> int:
        return sum(len(m["content"].split()) for m in messages)


def test_a_build_keeps_disagreements_only(store, tmp_path):
    built_sft(store, tmp_path, "sft-a", {"train": [example("s1", 1), example("s2", 0)], "val": [example("s3", 0)]})
    student = Scripted({
        ("s1", 2): 'step 0 <tool_call>{"name": "Read", "arguments": {"path": "s1/0.py"}}</tool_call>',  # agrees
        ("s1", 4): "Fixed s1.",  # agrees
        ("s2", 2): "   ",  # an empty answer: no pair
    })
    p = plan(store, PairsConfig(base_model="m"))
    assert p.source.name == "sft-a" and len(p.contexts) == 3
    with pytest.raises(BuildError, match="no preference pairs"):
        build(p, student, tmp_path / "out1")
    assert sorted(student.asked) == [("s1", 2), ("s1", 4), ("s2", 2)]  # never the val session

    student.answers[("s2", 2)] = "I could not fix it, because…"
    man = build(p, student, tmp_path / "out2")
    records = list(manifests.iter_examples(tmp_path / "out2", "train"))
    assert [(r["session_id"], r["turn"], r["rejected"][0]["content"], r["truncated"]) for r in records] == \
        [("s2", 2, "I could not fix it, because", True)]
    report = json.loads((tmp_path / "out2" / manifests.REPORT).read_text())
    assert (report["contexts"], report["agreed"], report["pairs"], report["excluded"]) == (3, 2, 1, 0)
    assert report["truncated"] == 1
    assert [o["result"] for o in report["outcomes"]] == ["agreed", "agreed", "pair"]
    assert (man.kind, man.spec_id, man.mode, man.examples) == ("preference", "preference_v1", "pairs", 1)
    assert [(u.id, u.split, u.examples) for u in man.sessions] == [("s1", "train", 0), ("s2", "train", 1)]
    assert man.splits["train"].tokens > man.splits["train"].trained_tokens > 0


def test_no_sft_dataset_or_no_adapter_is_a_clear_error(store, tmp_path):
    with pytest.raises(BuildError, match="no SFT dataset of m"):
        plan(store, PairsConfig(base_model="m"))
    built_sft(store, tmp_path, "sft-a", {"train": [example("s1", 0)]})
    with pytest.raises(BuildError, match="not a LoRA adapter"):
        plan(store, PairsConfig(base_model="m", adapter=str(tmp_path)))
    with pytest.raises(BuildError, match="no dataset named 'nope'"):
        plan(store, PairsConfig(base_model="m", source="nope"))
