"""Interrupted (abandoned) sessions give their completed turns: the examples run up to the last completed action, the
unfinished tail (a request never answered, a pending call, a result nobody answered) never appears. A constructed
session of each kind and the real public transcripts, through the real build worker and CLI."""
from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select

from app.cli.main import main
from app.core.base.schema import AgentSession, MessageRow
from app.core.datasets.catalog import Registry
from app.core.datasets.convert import completed_turns, conversation
from tests.core.capture.helpers import REAL, assistant, call, result, text, user, write
from tests.core.datasets.helpers import ingest, records, write_session

TAIL = "UNFINISHED-TAIL"


JOBS = {"pending": ("utils.py", "add() returns a - b", "The sign in add() is wrong."),
        "request": ("parser.py", "parse_line drops the last field", "The slice stops one field early."),
        "result": ("stats.py", "mean([]) divides by zero", "An empty list needs a guard.")}


def interrupted(folder: Path, sid: str, tail: str) -> None:
    """Read, edit (all answered), then the tail: a pending call, an unanswered request or an unanswered result."""
    file, bug, finding = JOBS[tail]
    u = lambda *a, **k: user(*a, sessionId=sid, **k)
    a = lambda *a_, **k: assistant(*a_, sessionId=sid, **k)
    recs = [u("u1", None, f"Fix it: {bug}, see {file}"),
            a("a1", "u1", [text(f"First I will read {file}."), call(f"{sid}-c1", "Read", file_path=file)]),
            u("r1", "a1", [result(f"{sid}-c1", f"# {bug}\n" + "\n".join(f"line {i} of {file}" for i in range(9)))]),
            a("a2", "r1", [text(finding), call(f"{sid}-c2", "Edit", file_path=file, new=f"fixed {bug}")]),
            u("r2", "a2", [result(f"{sid}-c2", f"{file} updated")])]
    if tail == "pending":
        recs += [a("a3", "r2", [text(f"{TAIL}: now the tests."), call(f"{sid}-c3", "Bash", command=f"pytest {TAIL}")])]
    elif tail == "request":
        recs += [a("a3", "r2", [text(f"Fixed in {file}.")]), u("u2", "a3", f"{TAIL}: also add a test")]
    else:  # an unanswered result
        recs += [a("a3", "r2", [call(f"{sid}-c3", "Bash", command="pytest -q")]),
                 u("r3", "a3", [result(f"{sid}-c3", f"4 passed {TAIL}")])]
    write(folder / f"{sid}.jsonl", *recs)


def test_the_completed_turns_end_on_the_last_completed_action():
    call_ = lambda i: {"id": i, "type": "function", "function": {"name": "Bash", "arguments": {}}}
    head = [{"role": "system", "content": "s"}, {"role": "user", "content": "do it"},
            {"role": "assistant", "content": "", "tool_calls": [call_("a"), call_("b")]},
            {"role": "tool", "tool_call_id": "a", "content": "ok"}, {"role": "tool", "tool_call_id": "b", "content": "ok"}]
    pending = {"role": "assistant", "content": "", "tool_calls": [call_("c")]}
    assert completed_turns(head + [pending]) == head[:3]  # both calls answered: the last completed action
    half = {"role": "assistant", "content": "", "tool_calls": [call_("d"), call_("e")]}
    assert completed_turns(head + [half, {"role": "tool", "tool_call_id": "d", "content": "ok"}]) == head[:3]
    answer = {"role": "assistant", "content": "done"}
    assert completed_turns(head + [answer, {"role": "user", "content": "and?"}]) == head + [answer]
    thinking_aloud = {"role": "assistant", "content": "let me look"}  # text then a call of the same turn
    assert completed_turns(head + [thinking_aloud, pending]) == head[:3]
    assert completed_turns(head[:2]) == []  # nothing completed


def test_abandoned_sessions_give_their_completed_turns_and_never_their_tail(store, agent_dir, build):
    for i in range(3):
        write_session(agent_dir, i)
    kinds = {"pending": "a0000000-0000-4000-8000-000000000001", "request": "a0000000-0000-4000-8000-000000000002",
             "result": "a0000000-0000-4000-8000-000000000003"}
    for kind, sid in kinds.items():
        interrupted(agent_dir, sid, kind)
    ingest(store, agent_dir)
    with store.session() as s:
        abandoned = set(s.scalars(select(AgentSession.id).where(AgentSession.outcome == "abandoned")))
    assert len(abandoned) == 3

    outcome, ds = build(name="trimmed", mode="full", val_share=0.0, test_share=0.0, max_length=1024)
    assert outcome.ok, outcome.message
    folder = Path(ds.path)
    train = records(folder, "train")
    from_abandoned = [r for r in train if r["session_id"] in abandoned]
    assert {r["session_id"] for r in from_abandoned} == abandoned  # each gives examples
    man = json.loads((folder / "manifest.json").read_text())
    assert man["counts"]["abandoned sessions trimmed"] == 3
    assert man["counts"]["examples from trimmed sessions"] == len(from_abandoned)
    taught = {m["content"] for r in from_abandoned for m in r["messages"] if m["role"] == "assistant"}
    assert {finding for _, _, finding in JOBS.values()} | {"Fixed in parser.py."} <= taught  # every completed step
    for path in folder.iterdir():
        assert TAIL not in path.read_text()  # not in an example, the preview nor the report

    outcome, ds = build(name="whole", mode="full", val_share=0.0, test_share=0.0, max_length=1024,
                        filters={"drop_abandoned": True})
    assert outcome.ok, outcome.message
    assert not {r["session_id"] for r in records(Path(ds.path), "train")} & abandoned
    assert json.loads((Path(ds.path) / "report.json").read_text())["filters"]["abandoned"] == 3


def _completed_at(full: list[dict], i: int) -> bool:
    """The definition, from the outside: every call of full[i] has a result later on, or full[i] answered in text."""
    m = full[i]
    later = {r.get("tool_call_id") for r in full[i + 1:] if r["role"] == "tool"}
    calls = {c["id"] for c in m.get("tool_calls") or []}
    return m["role"] == "assistant" and (calls <= later if calls else
                                         i + 1 == len(full) or full[i + 1]["role"] != "assistant")


def _last_position(example: list[dict], full: list[dict]) -> int:
    """Where the example's last message sits in the full conversation (its messages in order, system left out)."""
    at = 0
    for m in example[1:]:
        at = next(j for j in range(at, len(full)) if full[j] == m) + 1
    return at - 1


def test_real_transcripts_abandoned_sessions_end_on_completed_actions(store, tiny_model, capsys):
    from app.core.capture.ingest import Ingestor
    from app.core.importer import import_paths

    import_paths(Ingestor(store), [REAL])
    assert main(["dataset", "build", "--name", "real", "--model", str(tiny_model), "--max-length", "2048",
                 "--test", "0", "--val", "0", "--min-steps", "1", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    folder = Path(Registry(store).get("real").path)
    with store.session() as s:
        abandoned = {sess.id: sess for sess in s.scalars(select(AgentSession).where(AgentSession.outcome == "abandoned"))}
        full = {sid: conversation(sess, s.scalars(select(MessageRow).where(
            MessageRow.session_id == sid, MessageRow.branch == 0).order_by(MessageRow.seq)).all()).messages
            for sid, sess in abandoned.items()}
    examples = [r for r in records(folder, "train") if r["session_id"] in abandoned]
    used = {u["id"] for u in json.loads((folder / "manifest.json").read_text())["sessions"]} & set(abandoned)
    assert examples and summary["abandoned"] == {"sessions_trimmed": len(used), "examples_added": len(examples)}
    ends: dict[str, list[int]] = {}
    for r in examples:
        conv = full[r["session_id"]]
        last = max(i for i in range(len(conv)) if _completed_at(conv, i))  # the tail is what comes after it
        end = _last_position(r["messages"], conv)
        assert end <= last, f"{r['id']} of {r['session_id']} reaches into the unfinished tail"
        ends.setdefault(r["session_id"], []).append(end - last)
    assert all(max(v) == 0 for v in ends.values())  # and each session is taught up to its last completed action
