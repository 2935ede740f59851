"""The inbox: stable dropped files are queued (priority from the folder or a sidecar) and moved to accepted/; bad ones
land in refused/ with their reason; a file still being written is left alone; nothing is deleted or queued twice."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from app.core.queue.inbox import DEFAULTS_KEY, TAKING, Inbox
from app.core.queue.scheduler import Queue
from app.core.train.spec import JobSpec
from tests.conftest import write_jsonl
from tests.tiny_model import chat_records


@pytest.fixture
def queue(store):
    q = Queue(store)
    q.pause()  # these tests queue jobs; none is started
    return q


@pytest.fixture
def inbox(queue) -> Inbox:
    queue.inbox.ensure()
    return queue.inbox


def settle(path: Path, age: float = 10.0) -> None:
    """Make a file look untouched for `age` seconds (instead of waiting for it)."""
    old = time.time() - age
    os.utime(path, (old, old))


def scan_twice(inbox: Inbox):
    return inbox.scan() + inbox.scan()


def settle_file(path: Path) -> Path:
    settle(path)
    return path


def test_a_chat_file_in_high_is_queued_as_high_and_moved_to_accepted(inbox, queue):
    dropped = settle_file(write_jsonl(inbox.root / "high" / "chat.jsonl", chat_records(6)))
    assert inbox.scan() == []  # first sighting: it may still be growing
    [outcome] = inbox.scan()
    job = queue.manager.job(outcome.job_id)
    assert (job.priority, job.kind, job.source, job.state, job.records) == ("high", "sft", "inbox", "queued", 6)
    assert not dropped.exists() and outcome.moved_to == inbox.root / "accepted" / f"{job.id}-chat.jsonl"
    assert outcome.moved_to.is_file() and job.dataset_path == str(outcome.moved_to)
    assert inbox.scan() == [] and len(queue.manager.jobs()) == 1  # taken once


def test_bad_files_are_refused_with_their_reason(inbox, queue):
    (inbox.root / "blob.jsonl").write_bytes(b"\x00\x01binary\x00")
    write_jsonl(inbox.root / "low" / "alpaca.jsonl", [{"instruction": "a", "input": "", "output": "b"}])
    (inbox.root / "notes.txt").write_text("hello")
    for path in inbox.root.rglob("*.*"):
        settle(path)
    outcomes = scan_twice(inbox)
    assert sorted(o.name for o in outcomes) == ["alpaca.jsonl", "blob.jsonl", "notes.txt"]
    assert all(o.job_id is None for o in outcomes) and queue.manager.jobs() == []
    refused = inbox.root / "refused"
    assert "binary" in (refused / "blob.jsonl.reason.txt").read_text()
    assert "Alpaca" in (refused / "alpaca.jsonl.reason.txt").read_text()
    assert "not a .jsonl file" in (refused / "notes.txt.reason.txt").read_text()
    assert (refused / "blob.jsonl").read_bytes() == b"\x00\x01binary\x00"  # kept as it was


def test_a_file_still_being_written_is_not_taken(inbox, queue):
    path = inbox.root / "normal" / "growing.jsonl"
    with path.open("w") as fh:
        fh.write(json.dumps(chat_records(1)[0]) + "\n")
        fh.flush()
        settle(path)
        assert inbox.scan() == []  # first sighting
        fh.write(json.dumps(chat_records(2)[1]) + "\n")  # it grows: size and mtime change
        fh.flush()
        assert inbox.scan() == []
        settle(path)  # untouched for a while now
        assert inbox.scan() == []  # …but changed since the last scan
    fresh = write_jsonl(inbox.root / "normal" / "fresh.jsonl", chat_records(2))
    soon = time.time() + 60
    os.utime(fresh, (soon, soon))  # touched "just now", however slow this machine is
    outcomes = scan_twice(inbox)  # growing.jsonl is now stable; fresh.jsonl was written just now
    assert [o.name for o in outcomes] == ["growing.jsonl"] and fresh.exists()
    assert queue.manager.job(outcomes[0].job_id).records == 2


def test_preference_pairs_and_a_sidecar_set_recipe_priority_and_steps(inbox, queue):
    pairs = [{"prompt": "What is 2+2?", "chosen": "4", "rejected": "5"}] * 3
    data = write_jsonl(inbox.root / "prefs.jsonl", pairs)
    side = inbox.root / "prefs.json"
    side.write_text(json.dumps({"priority": "low", "max_steps": 7}))
    settle(data), settle(side)
    [outcome] = scan_twice(inbox)
    job = queue.manager.job(outcome.job_id)
    assert (job.kind, job.priority) == ("dpo", "low")
    assert JobSpec.read(Path(job.spec_path))[0].hyper.max_steps == 7
    assert (inbox.root / "accepted" / f"{job.id}-prefs.json").is_file()  # the sidecar travels with it


def test_defaults_setting_and_bad_sidecars(inbox, queue):
    queue.set_setting(DEFAULTS_KEY, {"max_steps": 3})
    good = write_jsonl(inbox.root / "a.jsonl", chat_records(2))
    bad = write_jsonl(inbox.root / "high" / "b.jsonl", chat_records(2))
    (inbox.root / "high" / "b.json").write_text(json.dumps({"epochs": 2}))
    for path in inbox.root.rglob("*.json*"):
        settle(path)
    outcomes = {o.name: o for o in scan_twice(inbox)}
    job = queue.manager.job(outcomes["a.jsonl"].job_id)
    assert JobSpec.read(Path(job.spec_path))[0].hyper.max_steps == 3 and not good.exists()
    assert outcomes["b.jsonl"].job_id is None and "unknown key(s) epochs" in outcomes["b.jsonl"].reason
    assert (inbox.root / "refused" / "b.json").is_file() and not bad.exists()


def test_name_clashes_get_a_suffix(inbox):
    for folder in ("high", "low"):
        (inbox.root / folder / "same.jsonl").write_text("not json\n")
        settle(inbox.root / folder / "same.jsonl")
    scan_twice(inbox)
    refused = sorted(p.name for p in (inbox.root / "refused").iterdir())
    assert refused == ["same-2.jsonl", "same-2.jsonl.reason.txt", "same.jsonl", "same.jsonl.reason.txt"]


def test_a_scan_that_crashed_mid_take_queues_nothing_twice(inbox, queue):
    taking = inbox.root / TAKING / "high"
    queued = write_jsonl(taking / "queued.jsonl", chat_records(2))
    job = queue.add(queued, priority="high", source="inbox")  # queued, then the app died before the move
    write_jsonl(taking / "not-yet.jsonl", chat_records(2))  # the app died before queueing this one
    inbox.scan()
    assert (inbox.root / "accepted" / f"{job.id}-queued.jsonl").is_file()
    assert (inbox.root / "high" / "not-yet.jsonl").is_file() and len(queue.manager.jobs()) == 1


def test_the_queue_tick_takes_inbox_files(queue):
    path = write_jsonl(queue.inbox.ensure() / "low" / "t.jsonl", chat_records(2))
    settle(path)
    outcomes = queue.tick().inbox + queue.tick().inbox
    assert [o.name for o in outcomes] == ["t.jsonl"]
    assert queue.manager.job(outcomes[0].job_id).priority == "low"
