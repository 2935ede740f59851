"""A Claude Code record without a uuid is known by its line number, which no real uuid can equal: a record whose uuid
(or parentUuid) is literally `line:<n>` neither drops the uuid-less record on line n nor hangs under it, held in
memory and on disk (claude_nodes.Held, OnDisk); everything else as for any other uuid."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.core.capture import prepare as prepare_module, rows
from app.core.capture.parsers.claude import parse_claude_with_subagents
from app.core.capture.prepare import prepare
from app.core.capture.sources import CaptureConfig
from app.core.capture.spill import Spill
from app.core.scrub.scrubber import Scrubber
from tests.core.capture.helpers import assistant, text, user, write

SCRUBBER = Scrubber()


def _records(uuid: str, dangling: str) -> list[dict]:
    """Lines 3, 5 and 8 have no uuid; `uuid` is line 1's, `dangling` line 9's parent, which no record has."""
    def bare(record: dict) -> dict:
        del record["uuid"]
        return record

    records = [
        user(uuid, None, "first question"),
        assistant("a1", uuid, [text("first answer")]),
        bare(user(None, "a1", "second question")),
        assistant("a2", None, [text("second answer")]),
        bare(user(None, "a2", "third question")),
        assistant("a3", None, [text("third answer")]),
        {**user("s1", None, "a sub-agent's root with a uuid"), "isSidechain": True},
        bare({**user(None, None, "a sub-agent's root without one"), "isSidechain": True}),
        assistant("a4", dangling, [text("fourth answer")]),
    ]
    return [{**r, "timestamp": f"2025-03-01T10:{i:02d}:00.000Z"} for i, r in enumerate(records)]


def _rows(path: Path, monkeypatch, tmp_path: Path, on_disk: bool) -> tuple:
    with monkeypatch.context() as m:
        if on_disk:
            m.setattr(prepare_module, "SPILL_FILE_BYTES", 0)  # the records wait on disk
        ready = prepare(path, "claude-code", True, CaptureConfig(), SCRUBBER, spill_dir=tmp_path)
        assert (ready.spill is not None) is on_disk
        sessions, messages = rows.session_rows("sid", ready.session)
        ready.close()
    for s in sessions:
        s.pop("updated_at")
    return sessions, messages


def _renamed(value, names: dict[str, str]):
    """value with every string in names replaced by its new name (at any depth)."""
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, dict):
        return {k: _renamed(v, names) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_renamed(v, names) for v in value)
    return value


@pytest.mark.parametrize("on_disk", [False, True], ids=["held", "on-disk"])
def test_a_uuid_spelled_like_a_line_key_collides_with_nothing(tmp_path, monkeypatch, on_disk):
    path = tmp_path / "projects" / "-home-me-proj" / "11111111-2222-3333-4444-555555555555.jsonl"
    write(path, *_records("line:3", "line:5"))
    literal = _rows(path, monkeypatch, tmp_path, on_disk)
    write(path, *_records("u-first", "nowhere"))  # the same file with uuids no line key resembles
    plain = _rows(path, monkeypatch, tmp_path, on_disk)
    assert literal == _renamed(plain, {"u-first": "line:3", "nowhere": "line:5"})
    texts = [m["text"] for m in literal[1] if m["session_id"] == "sid" and m["branch"] == 0]
    assert texts == ["first question", "first answer", "second question", "second answer", "third question",
                     "third answer", "fourth answer"]  # line 3 kept; line 9 not hung under line 5
    subagents = sorted(s["native_id"] for s in literal[0] if s["id"] != "sid")
    assert subagents == ["line:8", "s1"]  # a uuid-less root names its group by its line, as before


def test_held_and_on_disk_resolve_the_collision_the_same(tmp_path):
    path = write(tmp_path / "S.jsonl", *_records("line:3", "line:5"))
    held = parse_claude_with_subagents(path, final=True)
    (tmp_path / "spill").mkdir()
    spill = Spill(tmp_path / "spill")
    on_disk = parse_claude_with_subagents(path, final=True, spill=spill)
    on_disk.messages = list(on_disk.messages)
    for sub in on_disk.subagents:
        sub.messages = list(sub.messages)
    spill.close()
    assert dataclasses.asdict(on_disk) == dataclasses.asdict(held)
    assert held.skipped["duplicate"] == 0
    assert [m.id for m in held.messages] == ["line:3", "a1", None, "a2", None, "a3", "a4"]
    assert sorted(s.session_id for s in held.subagents) == ["line:8", "s1"]
