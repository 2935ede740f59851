"""Dataset builds through the real worker: stable fingerprints, splits, the held-out set, replay, planted problems."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from app.core.capture.rows import pack_parts, unpack
from app.core.datasets.catalog import Registry
from app.core.datasets.splits import split_of
from tests.core.datasets.helpers import ingest, records, split_ids, write_session


def _ids_by_session(folder: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for split in ("train", "val", "test"):
        for rec in records(folder, split):
            out.setdefault(rec["session_id"], set()).add(rec["id"])
    return out


def stored_sessions(store) -> set[str]:
    """The session ids the store holds (derived from each file's path: the same only under the same test root)."""
    from sqlalchemy import select

    from app.core.base.schema import CaptureFile

    with store.session() as db:
        return set(db.scalars(select(CaptureFile.session_id)))


def more_until_one_held_out(store, agent_dir: Path, start: int, count: int, val_share: float,
                            test_share: float) -> int:
    """Write and ingest `count` sessions from number `start`, then more until the stable hash puts at least one of
    the new ones in the test split (the ids come from temporary paths: a fixed count would hold out none now and
    then). Returns the next session number."""
    before, index = stored_sessions(store), start
    while index < start + count + 60:
        write_session(agent_dir, index)
        index += 1
        if index < start + count:
            continue
        ingest(store, agent_dir)
        if any(split_of(sid, val_share, test_share) == "test" for sid in stored_sessions(store) - before):
            return index
    raise AssertionError("no new session hashed into the held-out share")


def test_rebuild_after_one_new_session_changes_only_its_examples(store, agent_dir, build):
    for i in range(10):
        write_session(agent_dir, i)
    ingest(store, agent_dir)
    first, a = build(name="a", mode="full")
    assert first.ok, first.message
    assert a.examples >= 10 and a.excluded == 0

    again, _ = build(name="b", mode="full")
    assert again.ok and again.identical_to == "a" and again.fingerprint == a.fingerprint  # nothing new: same print

    write_session(agent_dir, 10)
    ingest(store, agent_dir)
    third, c = build(name="c", mode="full")
    assert third.ok and third.identical_to is None and c.fingerprint != a.fingerprint
    before, after = _ids_by_session(Path(a.path)), _ids_by_session(Path(c.path))
    new_sessions = set(after) - set(before)
    assert len(new_sessions) == 1
    assert {k: v for k, v in after.items() if k not in new_sessions} == before  # every old example unchanged
    old_splits, new_splits = split_ids(Path(a.path)), split_ids(Path(c.path))
    for split in old_splits:
        assert old_splits[split] <= new_splits[split]  # and in the same split


def test_no_session_in_two_splits_and_the_heldout_set_is_never_trained_on(store, agent_dir, build):
    stop = more_until_one_held_out(store, agent_dir, 0, 16, val_share=0.2, test_share=0.25)
    first, a = build(name="first", mode="full", val_share=0.2, test_share=0.25)
    assert first.ok, first.message
    heldout = Registry(store).heldout(a.base_model)
    by_split = {s: {r["session_id"] for r in records(Path(a.path), s)} for s in ("train", "val", "test")}
    assert heldout and heldout == by_split["test"]  # the first build held out its test sessions
    assert not (by_split["train"] & by_split["val"]) and not (by_split["train"] & by_split["test"])
    assert not (by_split["val"] & by_split["test"])

    more_until_one_held_out(store, agent_dir, stop, 12, val_share=0.1, test_share=0.1)  # more work comes in
    second, b = build(name="second", replay=0.3, val_share=0.1, test_share=0.1)  # incremental with replay
    assert second.ok, second.message
    man = json.loads((Path(b.path) / "manifest.json").read_text())
    assert man["mode"] == "incremental" and man["replayed_from"] == ["first"]
    train = records(Path(b.path), "train")
    replayed = [r for r in train if r["source"] == "replay"]
    fresh = [r for r in train if r["source"] == "new"]
    assert replayed and abs(len(replayed) / len(train) - 0.3) < 0.15
    assert {r["session_id"] for r in fresh}.isdisjoint(by_split["train"])  # new = not in the earlier dataset
    for ds in Registry(store).all():
        for split in ("train", "val"):
            assert not {r["session_id"] for r in records(Path(ds.path), split)} & heldout
    grown = Registry(store).heldout(a.base_model)
    assert heldout < grown  # the second build held out a share of its new sessions; the first ones stay held out
    assert {r["session_id"] for r in records(Path(b.path), "test")} == grown  # its test split: the whole set
    assert man["heldout_sessions"] == len(grown) and set(man["heldout_added"]) == grown - heldout


def test_planted_leakage_and_secret_are_caught_and_reported(store, agent_dir, build, ns_home):
    for i in range(6):
        write_session(agent_dir, i)
    answer = "The bug was the minus sign in add(); it now returns a + b and all four tests pass."
    write_session(agent_dir, 6, answer=answer, extra_user=f"\nExpected final answer: {answer}")
    ingest(store, agent_dir)
    secret = "AKIAIOSFODNN7EXAMPLE"  # a session stored before a rule existed: capture's scrub never saw it
    con = sqlite3.connect(ns_home / "nightschool.db")
    row = con.execute("select id, parts_z from messages where role='tool' order by id limit 1").fetchone()
    con.execute("update messages set parts_z=? where id=?",
                (pack_parts(unpack(row[1]).decode().replace("4 passed", f"aws_access_key_id={secret}")
                            .replace('"t":"', f'"t":"key {secret} ', 1))["parts_z"], row[0]))
    con.commit()
    con.close()

    outcome, ds = build(name="checked", mode="full", test_share=0.0, val_share=0.0, max_length=1024)
    assert outcome.ok, outcome.message
    report = json.loads((Path(ds.path) / "report.json").read_text())
    checks = {p["check"]: p["detail"] for e in report["excluded"] for p in e["problems"]}
    assert "leakage" in checks and "already appears in the prompt" in checks["leakage"]
    assert "secret" in checks and "aws_access_key" in checks["secret"] and secret not in checks["secret"]
    assert ds.excluded == 2
    for path in Path(ds.path).iterdir():
        assert secret not in path.read_text()  # neither in the examples, the preview nor the report


def test_subagent_sessions_are_examples_of_their_own_in_their_parents_split(store, agent_dir, build):
    from tests.core.capture.helpers import assistant, call, result, text, user, write

    sid = "99999999-0000-4000-8000-000000000000"
    side = dict(isSidechain=True, sessionId=sid)
    write(agent_dir / f"{sid}.jsonl",
          user("u1", None, "find the bug in x.py", sessionId=sid),
          assistant("a1", "u1", [call("toolu_task", "Task", prompt="Find the bug in x.py")], sessionId=sid),
          user("s1", None, "Find the bug in x.py", **side),
          assistant("s2", "s1", [call("g1", "Grep", pattern="def ")], **side),
          user("s3", "s2", [result("g1", "x.py:3: def f(): return 1/0")], **side),
          assistant("s4", "s3", [text("The bug is the division by zero on line 3 of x.py.")], **side),
          user("u2", "a1", [result("toolu_task", [text("Line 3 divides by zero.")])], sessionId=sid),
          assistant("a2", "u2", [text("Found it: line 3 divides by zero.")], sessionId=sid))
    ingest(store, agent_dir)
    loose = {"min_steps": 1}
    # nothing held out: a held-out session stays in every later build's test split whatever the filters say, and
    # this session's id (so its split) depends on the file's path
    outcome, ds = build(name="subs", mode="full", filters=loose, val_share=0.4, test_share=0.0, max_length=1024)
    assert outcome.ok, outcome.message
    rows = {s.session_id: s.split for s in Registry(store).sessions_of(ds.id)}
    assert len(rows) == 2 and len(set(rows.values())) == 1  # parent and sub-agent: two sessions, one split
    sub_examples = [r for split in ("train", "val", "test") for r in records(Path(ds.path), split)
                    if r["messages"][1]["content"] == "Find the bug in x.py"]
    assert sub_examples and any("division by zero" in m["content"] for m in sub_examples[0]["messages"])

    outcome, ds = build(name="nosubs", mode="full", filters={**loose, "include_subagents": False}, max_length=1024)
    assert outcome.ok and json.loads((Path(ds.path) / "report.json").read_text())["filters"]["sub-agent sessions"] == 1


def test_an_incremental_build_reads_only_sessions_stored_since_they_were_used(store, agent_dir, build):
    """The build's cost follows what is new: sessions an earlier dataset used and not stored again since are left
    unread (counted as already used); one that grew since is read, compared by content and built again."""
    from sqlalchemy import func, select

    from app.core.base.schema import AgentSession

    for i in range(6):
        write_session(agent_dir, i)
    ingest(store, agent_dir)
    first, a = build(name="a", mode="full", val_share=0.0, test_share=0.0)
    assert first.ok, first.message
    write_session(agent_dir, 0, answer="Done, and I also updated the changelog.")  # session 0 grew
    write_session(agent_dir, 6)  # and a new one came in
    ingest(store, agent_dir)
    unread = Registry(store).unchanged_since_used(a.base_model)
    with store.session() as db:
        left = set(db.scalars(select(AgentSession.id).where(unread)))
        assert len(left) == 5 and db.scalar(select(func.count()).select_from(AgentSession)) == 7
    second, b = build(name="b", val_share=0.0, test_share=0.0, replay=0.0)
    assert second.ok, second.message
    built = set(_ids_by_session(Path(b.path)))
    assert len(built) == 2 and not built & left  # the grown session and the new one, nothing else
    man = json.loads((Path(b.path) / "manifest.json").read_text())
    assert man["mode"] == "incremental" and sum(v for k, v in man["filters"].items()
                                                if k.startswith("already")) == 5
