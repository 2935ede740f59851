"""The student's own work in datasets and cycles, for real: accepted corrections join the next build's train split
with provenance and their preference pairs (the pairs worker takes them in), the manifest lists them apart and the
fingerprint moves; with review required nothing trains before Accept; a correction trains once; answers a later
captured teacher session contradicts are flagged; the cycle's building stage asks the teacher and the report card
counts the student's own work."""
from __future__ import annotations

import json
import shutil
import threading
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import func, select

from app.core.base.schema import AgentSession, MessageRow, RequestKey
from app.core.datasets import manifest as manifests
from app.core.datasets.catalog import Registry
from app.core.experience import buffer, config, contradictions, corrections
from app.core.experience.buffer import Recorded
from tests.core.datasets.conftest import agent_dir, build  # noqa: F401 - the dataset tests' fixtures
from tests.core.datasets.helpers import ingest, records, write_session
from tests.core.experience.standin import StandInTeacher, chat

SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
TOOLS = [{"type": "function", "function": {"name": "Bash", "parameters": SCHEMA}},
         {"type": "function", "function": {"name": "Read", "parameters": {"type": "object", "properties": {
             "file_path": {"type": "string"}}, "required": ["file_path"]}}}]
STUDENT_BAD = {"role": "assistant", "content": '<tool_call>{"name": "Bash", "arguments": {"cmd": 1}}</tool_call>'}
FIX = {"role": "assistant", "content": "I will run the test suite first.",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "Bash", "arguments": json.dumps({"command": "pytest -q tests/"})}}]}


def _request(task: str, system: bool = True) -> dict:
    msgs = [{"role": "system", "content": "You are my coding agent."}] if system else []
    return {"messages": [*msgs, {"role": "user", "content": task}], "tools": TOOLS, "max_tokens": 64}


def flagged(store, exp_id: str, task: str = "Run the tests of the parser and tell me what fails") -> str:
    """A recorded answer with an invalid tool call (flagged by the buffer itself)."""
    buffer.record(store, Recorded(id=exp_id, request=_request(task), answer=STUDENT_BAD, client="agent",
                                  model="student", finish_reason="stop"))
    assert buffer.get(store, exp_id)["state"] == "flagged"
    return exp_id


def corrected(store, exp_id: str, task: str = "Run the tests of the parser and tell me what fails") -> dict:
    flagged(store, exp_id, task)
    out = corrections.offer(store, exp_id, FIX, source="teacher", teacher_model="stand-in-teacher", cost=0.002)
    assert out["state"] in ("accepted", "waiting"), out
    return out


def sessions(store, agent_dir, upto: int, start: int = 0) -> None:  # noqa: F811
    for i in range(start, upto):
        write_session(agent_dir, i)
    ingest(store, agent_dir)


def of_source(folder: str, source: str) -> list[dict]:
    return [r for r in records(Path(folder), "train") if r["source"] == source]


def test_an_accepted_correction_trains_in_the_next_build_once_with_its_pair(store, agent_dir, build):  # noqa: F811
    sessions(store, agent_dir, 6)
    first, a = build(name="a")
    assert first.ok, first.message
    assert not of_source(a.path, "correction") and not (Path(a.path) / manifests.PAIRS).exists()

    fix = corrected(store, "exp-1")
    second, b = build(name="b")  # no new session, only the correction: not "identical", a dataset of its own
    assert second.ok and second.identical_to is None, second.message
    assert b.fingerprint != a.fingerprint
    [example] = of_source(b.path, "correction")
    assert (example["correction_id"], example["experience_id"], example["teacher_model"]) == \
        (fix["id"], "exp-1", "stand-in-teacher")
    msgs = example["messages"]
    assert msgs[0]["role"] == "system" and msgs[0]["content"].startswith("You are my coding agent.")
    assert "Tools: Bash, Read. Call a tool by writing" in msgs[0]["content"]  # the request's tools, as sessions'
    assert msgs[-1]["tool_calls"][0]["function"] == {"name": "Bash", "arguments": {"command": "pytest -q tests/"}}
    masks, start = example["assistant_masks"], example["assistant_masks"].index(1)
    assert masks[start:start + sum(masks)] == [1] * sum(masks)  # one trained run: the correction's turn only
    assert len(masks) - start - sum(masks) <= 2  # and it is the last turn (the template's end-of-turn tokens after)
    for split in ("val", "test"):
        assert not [r for r in records(Path(b.path), split) if r.get("correction_id")]

    man = manifests.read(Path(b.path))
    [use] = man.corrections
    assert (use.correction_id, use.experience_id, use.teacher_model, use.source, use.cost) == \
        (fix["id"], "exp-1", "stand-in-teacher", "teacher", 0.002)
    assert use.created_at and use.example_id == example["id"]
    assert man.counts["from_corrections"] == 1 and man.counts["correction_pairs"] == 1
    [pair] = list(manifests.iter_pairs(Path(b.path)))
    assert pair["id"] == use.pair_id and pair["source"] == "correction" and pair["correction_id"] == fix["id"]
    assert "pytest -q tests/" in pair["chosen"][0]["content"] and '"cmd": 1' in pair["rejected"][0]["content"]
    assert pair["prompt"][-1] == {"role": "user", "content": "Run the tests of the parser and tell me what fails"}
    assert manifests.PAIRS in man.files and manifests.verify(Path(b.path)) == []

    copy = Path(shutil.copytree(b.path, Path(b.path).parent / "tampered"))
    (copy / manifests.PAIRS).chmod(0o644)
    (copy / manifests.PAIRS).write_text("{}\n")
    assert manifests.verify(copy) == [f"{manifests.PAIRS} changed after the build (sha256 differs)"]

    sessions(store, agent_dir, 9, start=6)
    third, c = build(name="c")  # new sessions; the correction was trained on: not added again
    assert third.ok, third.message
    assert not of_source(c.path, "correction") and manifests.read(Path(c.path)).corrections == []
    assert all(r.get("correction_id") is None or r["source"] == "replay" for r in records(Path(c.path), "train"))


def test_with_review_required_nothing_trains_before_accept(store, agent_dir, build):  # noqa: F811
    config.set_buffer(store, "require_review", True)
    sessions(store, agent_dir, 6)
    fix = corrected(store, "exp-review")
    assert fix["state"] == "waiting"
    first, a = build(name="a")
    assert first.ok, first.message
    assert not of_source(a.path, "correction") and manifests.read(Path(a.path)).corrections == []

    corrections.decide(store, fix["id"], accept=True, by="test")
    second, b = build(name="b")
    assert second.ok and second.identical_to is None, second.message
    assert [r["correction_id"] for r in of_source(b.path, "correction")] == [fix["id"]]


def test_corrections_beyond_the_share_wait_for_the_next_build(store, agent_dir, build):  # noqa: F811
    sessions(store, agent_dir, 4)
    for i in range(3):
        corrected(store, f"exp-{i}", task=f"Run the tests of module {i} and tell me what fails")
    first, a = build(name="a", mode="full", val_share=0.0, test_share=0.0, corrections_share=0.1,
                     corrections_min=1)
    assert first.ok, first.message
    new = len(of_source(a.path, "new"))
    took = len(of_source(a.path, "correction"))
    assert 0 < took == max(1, int(new * 0.1 / 0.9)) < 3 and took / (new + took) <= 0.1
    assert manifests.read(Path(a.path)).counts["corrections waiting for the next build (share)"] == 3 - took
    second, b = build(name="b", corrections_share=0.1, corrections_min=5)  # no new session: the minimum applies
    assert second.ok, second.message
    assert {r["experience_id"] for r in of_source(b.path, "correction")} | \
        {r["experience_id"] for r in of_source(a.path, "correction")} == {"exp-0", "exp-1", "exp-2"}


def test_the_pairs_worker_adds_the_datasets_correction_pairs(store, agent_dir, build, tiny_model):  # noqa: F811
    from app.core.datasets.pairs import PairsConfig
    from app.core.datasets.runs import start_pairs

    sessions(store, agent_dir, 6)
    fix = corrected(store, "exp-pair")
    built, ds = build(name="with-fix")
    assert built.ok, built.message
    done = start_pairs(store, PairsConfig(base_model=str(tiny_model), source=ds.name, max_contexts=2,
                                          max_new_tokens=4)).finish()
    assert done.ok, done.message
    mined = Registry(store).get(done.name)
    got = [r for r in records(Path(mined.path), "train") if r["source"] == "correction"]
    assert [(r["correction_id"], r["experience_id"], r["teacher_model"]) for r in got] == \
        [(fix["id"], "exp-pair", "stand-in-teacher")]
    report = json.loads((Path(mined.path) / manifests.REPORT).read_text())
    assert report["correction_pairs"] == 1


# --- contradicted by a later teacher session ---------------------------------------------------------------------

EARLY = datetime(2024, 12, 1, tzinfo=UTC)  # the sessions of tests.core.datasets.helpers are from 2025-03-01
LATE = datetime(2025, 6, 1, tzinfo=UTC)


def answered(store, exp_id: str, task: str, answer: dict, at: datetime = EARLY, tools: list = TOOLS) -> None:
    request = {"messages": [{"role": "user", "content": task}], "tools": tools}
    buffer.record(store, Recorded(id=exp_id, request=request, answer=answer, finish_reason="stop", created_at=at))
    assert buffer.get(store, exp_id)["state"] == "recorded"


def test_a_later_teacher_session_on_the_same_task_flags_a_disagreeing_answer(store, agent_dir):  # noqa: F811
    task = "Fix the failing test in utils.py"
    write_session(agent_dir, 0, task=task)  # the teacher first reads utils.py
    ingest(store, agent_dir)
    bash = {"role": "assistant", "content": "",
            "tool_calls": [{"id": "a", "type": "function",
                            "function": {"name": "Bash", "arguments": '{"command": "pytest -q"}'}}]}
    read = {"role": "assistant", "content": "",
            "tool_calls": [{"id": "a", "type": "function",
                            "function": {"name": "Read", "arguments": '{"file_path": "utils.py"}'}}]}
    answered(store, "differs", "  fix the FAILING test\n in utils.py ", bash)
    answered(store, "agrees", task, read)
    answered(store, "text", task, {"role": "assistant", "content": "The test is probably wrong."})
    answered(store, "before", task, bash, at=LATE)  # the session came before this answer: it says nothing
    answered(store, "unoffered", task, bash, tools=TOOLS[:1])  # the teacher's Read was not offered to the student
    answered(store, "other-task", "Fix the failing test in parser.py", bash)

    found = contradictions.scan(store)
    with store.session() as s:
        [sid] = s.scalars(select(AgentSession.id))
    assert sorted((c.experience_id, c.session_id) for c in found) == [("differs", sid), ("text", sid)]
    entry = buffer.get(store, "differs")
    assert entry["state"] == "flagged"
    [reason] = entry["reasons"]
    assert reason["kind"] == "contradicted" and sid in reason["text"]
    assert "called Read(utils.py)" in reason["text"] and "Bash(pytest -q)" in reason["text"]
    for exp_id in ("agrees", "before", "unoffered", "other-task"):
        assert buffer.get(store, exp_id)["state"] == "recorded", exp_id
    assert contradictions.scan(store) == []  # flagged entries are not scanned again


def test_the_scan_reads_only_sessions_stored_since_it_last_looked(store, agent_dir):  # noqa: F811
    write_session(agent_dir, 0, task="Tidy the imports in cli.py")
    ingest(store, agent_dir)
    answered(store, "early", "Rename the helper in db.py", {"role": "assistant", "content": "Done."})
    assert contradictions.scan(store) == []  # nobody asked that yet
    assert contradictions.index_requests(store) <= 1  # nothing new since: at most the newest session again
    write_session(agent_dir, 1, task="Rename the helper in db.py")  # then the teacher is asked it
    ingest(store, agent_dir)
    found = contradictions.scan(store)
    assert [c.experience_id for c in found] == ["early"]  # the session stored since the last scan was indexed
    with store.session() as s:
        keys = s.scalar(select(func.count()).select_from(RequestKey))
        users = s.scalar(select(func.count()).select_from(MessageRow).where(*contradictions.USER_ROWS))
    assert keys == users  # every captured request is indexed once


# --- the cycle: the teacher in the building stage, the report card ----------------------------------------------

def building(store, tiny_model, cycle_id: int):
    from app.core.runtime.school import cycles
    from app.core.runtime.school import stages
    from app.core.runtime.machinery.bus import Bus
    from app.core.runtime.school.policy import Policy

    policy = Policy(base_model=str(tiny_model), max_length=512)
    cycle = cycles.get(store, cycle_id)
    out = stages.building(stages.Ctx(store, Bus(), policy, None, threading.Event()), cycle)
    if out.output:
        cycles.end_stage(store, cycle, "building", out.output)
    return out, cycles.get(store, cycle_id)


def test_the_cycle_asks_the_teacher_and_the_report_card_counts_the_own_work(store, agent_dir, tiny_model,  # noqa: F811
                                                                              keyless):
    from app.core.runtime.school import cycles
    from app.core.runtime.school.report_card import report_card

    sessions(store, agent_dir, 6)
    flagged(store, "exp-cycle")
    teacher = StandInTeacher()
    teacher.default = chat(FIX, prompt_tokens=50, completion_tokens=10)
    try:
        config.set_teacher(store, "url", teacher.url)
        config.set_teacher(store, "model", "stand-in-teacher")
        out, cycle = building(store, tiny_model, cycles.create(store, str(tiny_model), "test", {}).id)
    finally:
        teacher.close()
    assert out.kind == "done", out.reason
    assert out.output["corrections"]["tried"] == 1 and out.output["corrections"]["accepted"] == 1
    assert out.output["from_corrections"] == 1 and out.output["correction_pairs"] == 1
    ds = Registry(store).get(out.output["dataset"])
    assert [r["experience_id"] for r in of_source(ds.path, "correction")] == ["exp-cycle"]
    card = report_card(store, cycle)
    assert card["own_work"]["examples"] == 1 and card["own_work"]["pairs"] == 1
    assert card["own_work"]["teacher"]["accepted"] == 1
    assert "1 example and 1 preference pair from the student's own work" in card["summary"]


def test_a_teacher_that_fails_never_fails_the_cycle(store, agent_dir, tiny_model, keyless):  # noqa: F811
    from app.core.runtime.school import cycles

    sessions(store, agent_dir, 6)
    flagged(store, "exp-down")
    teacher = StandInTeacher()
    teacher.default = (500, {"Content-Type": "text/plain"}, b"internal error")
    try:
        config.set_teacher(store, "url", teacher.url)
        config.set_teacher(store, "model", "stand-in-teacher")
        out, _ = building(store, tiny_model, cycles.create(store, str(tiny_model), "test", {}).id)
    finally:
        teacher.close()
    assert out.kind == "done", out.reason
    assert out.output["corrections"]["failed"] == 1 and out.output["corrections"]["accepted"] == 0
    assert out.output["from_corrections"] == 0
    assert buffer.get(store, "exp-down")["state"] == "flagged"  # it stays flagged, tried again after the cooldown
