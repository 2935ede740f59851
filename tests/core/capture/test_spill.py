"""A huge transcript's records wait on disk (the uuid tree's ids in a temporary SQLite file, the messages in a spill
file): the real Claude Code fixtures prepared that way give the same rows as held in memory (scrubbed, sub-agents,
branches), and so do seeded random trees (rewinds, duplicates, split responses, inline sub-agents, cycles); nothing is
left behind once the ingest is done, also when preparing failed; spilled messages read back what was set."""
from __future__ import annotations

import csv
import json
import os
import random
from pathlib import Path

import pytest

from app.core.base import paths
from app.core.base.store import Store
from app.core.capture import prepare as prepare_module, rows, spill as spill_module
from app.core.capture.ingest import Ingestor
from app.core.capture.parsers import claude as claude_parser
from app.core.capture.parsers.claude import parse_claude, parse_claude_with_subagents
from app.core.capture.prepare import prepare
from app.core.capture.session import Message, Part, Session
from app.core.capture.sources import CaptureConfig
from app.core.capture.spill import Spill, SpilledMessages
from app.core.scrub.scrubber import Scrubber
from tests.core.capture.helpers import REAL

REAL2 = REAL.parent / "real-world-2"


def _claude_files() -> list[Path]:
    out = []
    for base in (REAL, REAL2):
        with (base / "MANIFEST.tsv").open(encoding="utf-8") as fh:
            out += [base / r["local_path"] for r in csv.DictReader(fh, delimiter="\t")
                    if r.get("format") == "claude-code" and "/subagents/" not in r["local_path"]
                    and not Path(r["local_path"]).name.startswith("agent-")]
    return [f for f in out if f.is_file()]


def _as_rows(ready) -> tuple:
    sessions, messages = rows.session_rows("sid", ready.session)
    for s in sessions:
        s.pop("updated_at")
    return sessions, messages, ready.counts, ready.secrets


@pytest.mark.skipif(not (REAL2 / "MANIFEST.tsv").is_file(), reason=f"shared fixtures not here ({REAL2})")
def test_the_real_sessions_prepared_on_disk_give_the_same_rows(monkeypatch, tmp_path):
    files = _claude_files()
    plain = [_as_rows(prepare(f, "claude-code", True, CaptureConfig(), Scrubber())) for f in files]
    monkeypatch.setattr(prepare_module, "SPILL_FILE_BYTES", 0)  # every file "huge"
    spilled, kept = [], 0
    for f in files:
        ready = prepare(f, "claude-code", True, CaptureConfig(), Scrubber(), spill_dir=tmp_path)
        assert isinstance(ready.session.messages, SpilledMessages)
        assert all(isinstance(s.messages, SpilledMessages) for s in ready.session.subagents)
        spilled.append(_as_rows(ready))
        kept += ready.spill.kept
        ready.close()
        assert ready.spill.closed and ready.session is None
    assert len(files) > 20 and kept > 3_000_000  # the records really went through the file (read, merged, scrubbed)
    assert spilled == plain
    assert sum(p[3] for p in plain) > 0  # secrets were scrubbed on the way (and counted the same)
    assert sum(len(p[0]) for p in plain) > len(files) and sum(len(p[1]) for p in plain) > 1000  # sub-agents, rows
    assert not os.listdir(tmp_path)  # the spill is unnamed, the tree's SQLite file deleted: nothing left behind


def _record(rng: random.Random) -> dict:
    """One line of a made-up tree: few uuids (duplicates, rewinds, cycles), dangling and forward parents, split
    responses, parallel results, inline sub-agents with and without agentId, spawn calls named in results."""
    uuid = rng.choice(["u1", "u2", "u3", "u4", "u5", "u6", None, f"v{rng.randint(0, 30)}"])
    record = {"uuid": uuid, "parentUuid": rng.choice(["u1", "u2", "u3", "u4", "zz", None, f"v{rng.randint(0, 30)}"]),
              "sessionId": rng.choice("SST"), "timestamp": f"2025-01-0{rng.randint(1, 9)}T00:00:00Z",
              "isSidechain": rng.random() < 0.2,
              **({"agentId": rng.choice(["a1", "a2"])} if rng.random() < 0.2 else {})}
    calls, roll = ["c1", "c2", "c3"], rng.random()
    if roll < 0.3:
        blocks = [{"type": "text", "text": rng.choice(["ok", "done"])} if rng.random() < 0.5 else
                  {"type": "tool_use", "id": rng.choice(calls), "name": rng.choice(["Task", "Read"]),
                   "input": {"prompt": rng.choice(["go", "sub"])}} for _ in range(rng.randint(0, 2))]
        return {**record, "type": "assistant", "message": {
            "id": rng.choice(["m1", "m2", "m3", None]), "content": blocks, "model": rng.choice(["m", "<synthetic>"]),
            **({"usage": {"input_tokens": rng.randint(1, 9)}} if rng.random() < 0.5 else {})}}
    if roll < 0.55:
        results = [{"type": "tool_result", "tool_use_id": rng.choice(calls), "is_error": rng.random() < 0.2,
                    "content": rng.choice(["out", "agentId: a1 (done)", [{"type": "text", "text": "t"}]])}
                   for _ in range(rng.randint(1, 2))]
        return {**record, "type": "user", "message": {"content": results + [{"type": "text", "text": "and"}] *
                                                                  (rng.random() < 0.3)},
                **({"toolUseResult": {"agentId": "a2"}} if rng.random() < 0.2 else {})}
    if roll < 0.8:
        return {**record, "type": "user", "isMeta": rng.random() < 0.1,
                "message": {"content": rng.choice(["go", "sub", "more", ""])}}
    return {**record, **rng.choice([{"type": "summary", "message": {"content": "sum"}},
                                    {"type": "system", "subtype": "compact_boundary"},
                                    {"type": "progress", "parentToolUseID": "c2", "data": {"agentId": "a1"}}])}


def _listed(session: Session) -> Session:
    session.messages, session.abandoned = list(session.messages), [list(b) for b in session.abandoned]
    for sub in session.subagents:
        _listed(sub)
    return session


def test_seeded_random_trees_resolve_the_same_held_and_on_disk(tmp_path):
    path, seen = tmp_path / "S.jsonl", {"abandoned": 0, "subagents": 0, "linked": 0, "duplicate": 0}
    (tmp_path / "spill").mkdir()
    for seed in range(250):
        rng = random.Random(seed)
        path.write_text("".join(json.dumps(_record(rng)) + "\n" for _ in range(rng.randint(0, 40))))
        held = parse_claude_with_subagents(path, final=True)
        spill = Spill(tmp_path / "spill")
        on_disk = _listed(parse_claude_with_subagents(path, final=True, spill=spill))
        spill.close()
        assert on_disk == held, seed
        seen["abandoned"] += bool(held.abandoned)
        seen["subagents"] += bool(held.subagents)
        seen["linked"] += any(s.spawned_by for s in held.subagents)
        seen["duplicate"] += bool(held.skipped["duplicate"])
    assert min(seen.values()) > 40, seen  # the shapes that differ from a plain chain were there
    assert not os.listdir(tmp_path / "spill")


def test_an_ingest_leaves_no_spill_behind_written_or_failed(monkeypatch, tmp_path):
    monkeypatch.setattr(prepare_module, "SPILL_FILE_BYTES", 0)
    made: list[Spill] = []
    monkeypatch.setattr(prepare_module, "Spill", lambda d: made.append(Spill(d)) or made[-1])
    path = tmp_path / "projects" / "-home-me-p" / "0b16f11e-0000-4000-8000-000000000009.jsonl"
    path.parent.mkdir(parents=True)
    long = "x" * 3000
    path.write_text(json.dumps({"type": "user", "uuid": "u1", "sessionId": "s",
                                "message": {"role": "user", "content": long}}) + "\n")
    ingestor = Ingestor(Store(tmp_path / "s.db"), CaptureConfig(), Scrubber())
    result, = ingestor.ingest_many([path], final=True)
    assert result.status == "ok" and result.stored == 1
    assert len(made) == 1 and made[0].closed and made[0].kept >= len(long)

    def unreadable(*_a, **_kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(claude_parser, "parse_claude_with_subagents", unreadable)  # the file turns unreadable mid-read
    with path.open("a") as fh:
        fh.write('{"type":"user","uuid":"u2","parentUuid":"u1","message":{"role":"user","content":"more"}}\n')
    again = ingestor.ingest(path, final=True)
    assert again is not None and again.status == "error" and "Permission denied" in again.message
    assert len(made) == 2 and made[1].closed
    assert not [f for f in os.listdir(paths.work_dir()) if f.startswith("nightschool-")]  # no tree file from either


def test_a_parse_that_fails_midway_deletes_its_tree_file(monkeypatch, tmp_path):
    path = tmp_path / "0b16f11e-0000-4000-8000-000000000010.jsonl"
    path.write_text("".join(json.dumps({"type": "user", "uuid": f"u{i}", "message": {"content": "hi"}}) + "\n"
                            for i in range(5)))
    monkeypatch.setattr(claude_parser, "assemble", lambda *_a: (_ for _ in ()).throw(RuntimeError("boom")))
    (tmp_path / "work").mkdir()
    spill = Spill(tmp_path / "work")
    with pytest.raises(RuntimeError, match="boom"):
        parse_claude(path, final=True, spill=spill)
    spill.close()
    assert not os.listdir(tmp_path / "work")


def test_spilled_messages_read_back_what_was_set(monkeypatch, tmp_path):
    monkeypatch.setattr(spill_module, "BUFFER_BYTES", 4096)  # some blocks read back from the file, some from memory
    spill = Spill(tmp_path)
    odd = Message("assistant", [Part("tool_call", "é€😀 \ud800 lone " * 300, tool_name="Bash", call_id="c1",
                                     tool_input={"command": "ls", "n": 2**70, "f": 0.1, "nested": [{"k": "ü"}]},
                                     is_error=True)], id="m0", usage={"input_tokens": 3}, line=7, meta=True)
    words = [random.Random(k).randbytes(k * 97 % 900).hex() for k in range(1, 60)]  # some blocks over 4 KiB
    plain = [odd, *(Message("user", [Part("text", f"message {k} {w}")], id=f"m{k}") for k, w in enumerate(words, 1))]
    held = SpilledMessages(spill, plain[:-1])
    held.append(plain[-1])
    assert spill.written > 0 and spill.end > spill.written  # both places are read from
    assert len(held) == 60 and held == plain and list(held) == plain and list(reversed(held)) == plain[::-1]
    assert held[0] == odd and held[0] is not odd and held[-1] == plain[-1] and held[10:13] == plain[10:13]
    assert held[0].parts[0].tool_input["n"] == 2**70 and "\ud800" in held[0].parts[0].text
    changed = [Message("user", [Part("text", "scrubbed")])] * 3
    held[10:13] = changed
    held[-1] = odd
    assert held[10:13] == changed and held[-1] == odd and held[9] == plain[9] and len(held) == 60
    with pytest.raises(ValueError, match="cannot replace"):
        held[0:2] = changed
    with pytest.raises(IndexError):
        held[60]
    assert held != plain and not held == [] and bool(SpilledMessages(spill)) is False
    spill.close()


def test_where_no_spill_can_be_made_the_records_stay_in_memory(monkeypatch, tmp_path):
    monkeypatch.setattr(prepare_module, "SPILL_FILE_BYTES", 0)
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    path = tmp_path / "0b16f11e-0000-4000-8000-000000000011.jsonl"
    path.write_text(json.dumps({"type": "user", "uuid": "u1", "message": {"role": "user", "content": "y" * 2000}}))
    ready = prepare(path, "claude-code", True, CaptureConfig(), Scrubber(), spill_dir=not_a_folder)
    assert ready.spill is None and ready.session.messages[0].parts[0].text == "y" * 2000
    assert isinstance(ready.session.messages, list)


def test_a_full_disk_while_spilling_says_where(tmp_path):
    spill = Spill(tmp_path)

    class Full:
        def seek(self, _at):
            return None

        def write(self, _data):
            raise OSError(28, "No space left on device")

    spill.file.close()
    spill.file = Full()  # a stand-in for a disk that fills: no full disk can be made here
    with pytest.raises(OSError, match=f"No space left on device .*huge transcript's records in {tmp_path}"):
        spill.put(os.urandom(spill_module.BUFFER_BYTES))  # a buffer's worth: written at once


def test_each_record_is_kept_once(tmp_path):
    big = "z" * 5000
    first = {"type": "user", "uuid": "u1", "message": {"role": "user", "content": big}}
    lines = [first, *({"type": "file-history-snapshot", "messageId": f"m{i}"} for i in range(20)), first]  # no node
    path = tmp_path / "0b16f11e-0000-4000-8000-000000000012.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    spill = Spill(tmp_path)
    session = parse_claude(path, final=True, spill=spill)
    assert session.messages[0].parts[0].text == big and session.skipped["duplicate"] == 1
    assert len(big) < spill.kept < 2 * len(big)  # kept as read, pointed at once merged: not again for the duplicate
    spill.close()

