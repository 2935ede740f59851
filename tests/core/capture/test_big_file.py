"""One huge transcript in bounded memory: a generated ~100 MB Claude Code file ingests in a fresh process with its peak
RSS growing by less than a constant (its records wait on disk: 0.7-0.8x the file before, 1.4x before its big texts
did, 4.3x before records were streamed) and its counts balanced; its progress is told in bytes; a rollout read twice
and a session scrubbed in pieces read as before."""
from __future__ import annotations

import copy
import csv
import sqlite3
from pathlib import Path

import pytest

from app.core.base.store import Store
from app.core.capture.ingest import Ingestor
from app.core.capture.parsers import codex
from app.core.capture.parsers.claude import parse_claude_with_subagents
from app.core.capture.prepare import scrub
from app.core.capture.session import Message, Part, Session
from app.core.scrub.scrubber import Scrubber
from bench.bench_ingest import peak_rss
from bench.claude_lines import big_file
from tests.core.capture.helpers import REAL

REAL2 = REAL.parent / "real-world-2"
GROWTH_MIB = 128  # measured +84 MiB for 200 MB, 1 GB and 2 GB alike (bench/README.md "Ingest"); 200 MB: +156 before


def test_a_100_mb_file_ingests_in_a_fresh_process_in_bounded_memory(tmp_path):
    path = tmp_path / "projects" / "-home-dev-big" / "0b16f11e-0000-4000-8000-000000000001.jsonl"
    size = big_file(path, 100)
    lines = sum(1 for _ in path.open("rb"))
    got = peak_rss(path, tmp_path / "big.db")
    grown_mib, file_mib = (got["peak_kib"] - got["base_kib"]) / 1024, size / 1024**2
    assert grown_mib < GROWTH_MIB, (got, file_mib)
    assert got["status"] == "ok" and got["balanced"]
    assert (got["lines_in"], got["stored"], got["quarantined"], got["skipped"]) == (lines, lines, 0, 0)
    con = sqlite3.connect(tmp_path / "big.db")
    (sessions, messages), = con.execute("select count(*), sum(messages) from sessions")
    assert sessions == 1
    assert con.execute("select count(*) from messages where branch = 0").fetchone()[0] == messages > lines // 3
    assert con.execute("select count(*) from (select seq from messages group by session_id, branch, seq "
                       "having count(*) > 1)").fetchone()[0] == 0  # one copy of every record
    assert con.execute("select lines, stored, offset, size from capture_files").fetchone() == (lines, lines, size, size)


def test_a_big_files_progress_is_told_in_bytes_up_to_its_size(tmp_path, config, roots):
    path = roots["claude-code"] / "-home-me-proj" / "0b16f11e-0000-4000-8000-000000000001.jsonl"
    size = big_file(path, 9)
    told: list[tuple[Path, int, int]] = []
    ingestor = Ingestor(Store(tmp_path / "s.db"), config, Scrubber(home="/home/me"), reading=lambda *a: told.append(a))
    files: list[int] = []
    result, = ingestor.ingest_many([path], final=True, progress=lambda i, n, _p: files.append(i))
    assert result.status == "ok" and result.balanced and files == [1]
    done = [d for _, d, _ in told]
    assert {p for p, _, _ in told} == {path} and {s for _, _, s in told} == {size}
    assert len(done) >= 3 and done == sorted(done) and done[-1] == size


def _codex_files() -> list[Path]:
    with (REAL2 / "MANIFEST.tsv").open(encoding="utf-8") as fh:
        return [REAL2 / r["local_path"] for r in csv.DictReader(fh, delimiter="\t") if r["format"] == "codex"]


@pytest.mark.skipif(not (REAL2 / "MANIFEST.tsv").is_file(), reason=f"shared fixtures not here ({REAL2})")
def test_a_rollout_read_twice_reads_as_one_read_once(monkeypatch):
    files = _codex_files()
    once = [codex.parse_codex(f, final=True) for f in files]
    monkeypatch.setattr(codex, "HOLD_BYTES", 0)  # every rollout "big": echoes first, then the replay
    twice = [codex.parse_codex(f, final=True) for f in files]
    assert len(files) > 10 and twice == once


def test_a_session_scrubbed_in_pieces_is_scrubbed_as_a_whole():
    secrets = ['aws_key = "AKIAIOSFODNN7EXAMPLE"', "token ghp_1234567890abcdefghijklmnopqrstuvwxyzAB here",
               "ANTHROPIC_API_KEY is sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789", "cat /home/me/.env"]
    messages = [Message("assistant" if i % 2 else "user", [
        Part("text", f"step {i}: {secrets[i % 4]}"),
        Part("tool_call", tool_name="Bash", tool_input={"command": secrets[(i + 1) % 4]}, call_id=str(i))])
        for i in range(60)]
    session = Session("claude-code", "s", "/home/me/x.jsonl", cwd="/home/me/proj", messages=messages[:40],
                      abandoned=[messages[40:]], subagents=[Session("claude-code", "sub", "/home/me/x.jsonl",
                                                                    messages=copy.deepcopy(messages[:7]))])
    sessions, found = [session], []
    if REAL2.is_dir():
        sessions += [parse_claude_with_subagents(f, final=True) for f in sorted(REAL2.rglob("*.jsonl"))[:12]
                     if not f.name.startswith("agent-")]
    for one in sessions:
        whole, pieces = Scrubber(home="/home/me"), Scrubber(home="/home/me")
        expected = whole.session(copy.deepcopy(one))
        got = copy.deepcopy(one)
        scrub(pieces, got, chars=200)
        assert got == expected
        assert pieces.report.counts == whole.report.counts
        found.append(whole.report.total)
    assert found[0] >= 60  # the hand-made one: a secret in each message's text and one in each call
