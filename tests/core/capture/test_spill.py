"""A huge transcript's big texts wait in a spill file: the real Claude Code fixtures prepared with every big text
spilled give the same rows as without (scrubbed, sub-agents, branches); the spill's file is gone once the ingest is
done, also when preparing failed; a spilled part reads back what was set (non-ASCII, lone surrogates, huge ints)."""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from app.core.base.store import Store
from app.core.capture import prepare as prepare_module, rows
from app.core.capture.ingest import Ingestor
from app.core.capture.parsers import claude as claude_parser
from app.core.capture.parsers.claude import parse_claude
from app.core.capture.prepare import prepare
from app.core.capture.session import Part
from app.core.capture.sources import CaptureConfig
from app.core.capture.spill import SPILL_CHARS, Spill, SpilledPart
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
def test_the_real_sessions_prepared_with_a_spill_give_the_same_rows(monkeypatch, tmp_path):
    files = _claude_files()
    plain = [_as_rows(prepare(f, "claude-code", True, CaptureConfig(), Scrubber())) for f in files]
    monkeypatch.setattr(prepare_module, "SPILL_FILE_BYTES", 0)  # every file "huge"
    spilled = []
    for f in files:
        ready = prepare(f, "claude-code", True, CaptureConfig(), Scrubber(), spill_dir=tmp_path)
        spilled.append(_as_rows(ready))
        kept = ready.spill.kept
        ready.close()
        assert ready.spill.closed and ready.session is None
        spilled[-1] += (kept,)
    assert len(files) > 20 and sum(s[-1] for s in spilled) > 1_000_000  # texts really went through the file
    assert [s[:-1] for s in spilled] == plain
    assert sum(p[3] for p in plain) > 0  # secrets were scrubbed on the way (and counted the same)
    assert not os.listdir(tmp_path)  # unnamed files: nothing left behind


def test_an_ingest_leaves_no_spill_behind_written_or_failed(monkeypatch, tmp_path):
    monkeypatch.setattr(prepare_module, "SPILL_FILE_BYTES", 0)
    made: list[Spill] = []
    monkeypatch.setattr(prepare_module, "Spill", lambda d: made.append(Spill(d)) or made[-1])
    path = tmp_path / "projects" / "-home-me-p" / "0b16f11e-0000-4000-8000-000000000009.jsonl"
    path.parent.mkdir(parents=True)
    long = "x" * (SPILL_CHARS * 3)
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


def test_a_spilled_part_reads_back_what_was_set(tmp_path):
    spill = Spill(tmp_path)
    text = "é€😀 \ud800 lone " * SPILL_CHARS
    big_input = {"command": "ls " * SPILL_CHARS, "n": 2**70, "nested": [{"k": "ü"}]}
    part = spill.part(Part("tool_call", text, tool_name="Bash", tool_input=big_input, call_id="c1", is_error=True))
    assert isinstance(part, SpilledPart) and isinstance(part._text, tuple) and isinstance(part._input, tuple)
    assert (part.text, part.tool_input, part.tool_name, part.call_id, part.is_error, part.chars) == (
        text, big_input, "Bash", "c1", True, len(text))
    part.text, part.tool_input = "short", {"a": 1}  # as the scrubber sets them
    assert (part.text, part.tool_input, part.chars) == ("short", {"a": 1}, 5) and part._text == "short"
    assert spill.part(Part("text", "small")) == Part("text", "small")  # a small part stays as it is
    spill.close()


def test_where_no_spill_can_be_made_the_texts_stay_in_memory(monkeypatch, tmp_path):
    monkeypatch.setattr(prepare_module, "SPILL_FILE_BYTES", 0)
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    path = tmp_path / "0b16f11e-0000-4000-8000-000000000011.jsonl"
    path.write_text(json.dumps({"type": "user", "uuid": "u1", "message": {"role": "user", "content": "y" * SPILL_CHARS}}))
    ready = prepare(path, "claude-code", True, CaptureConfig(), Scrubber(), spill_dir=not_a_folder)
    assert ready.spill is None and ready.session.messages[0].parts[0].text == "y" * SPILL_CHARS


def test_a_full_disk_while_spilling_says_where(tmp_path):
    spill = Spill(tmp_path)

    class Full:
        def seek(self, _at):
            return None

        def write(self, _data):
            raise OSError(28, "No space left on device")

    spill.file.close()
    spill.file = Full()  # a stand-in for a disk that fills: no full disk can be made here
    with pytest.raises(OSError, match=f"No space left on device .*huge transcript's texts in {tmp_path}"):
        spill.put(b"x" * 10)


def test_each_big_text_is_spilled_once_as_it_is_read(tmp_path):
    big = "z" * (SPILL_CHARS * 2)
    first = {"type": "user", "uuid": "u1", "message": {"role": "user", "content": big}}
    lines = [first, *({"type": "file-history-snapshot", "messageId": f"m{i}"} for i in range(20)), first]  # no node
    path = tmp_path / "0b16f11e-0000-4000-8000-000000000012.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    spill = Spill(tmp_path)
    session = parse_claude(path, final=True, spill=spill)
    assert session.messages[0].parts[0].text == big and session.skipped["duplicate"] == 1
    assert spill.kept == len(big)  # not again for each later record that added no node
    part = session.messages[0].parts[0]
    assert spill.part(part) is part and spill.kept == len(big)
    spill.close()
