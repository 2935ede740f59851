"""Every tool call in the real-world-2 transcripts is read: per file, the calls capture's parsers put on the branch
that reached the end plus those on abandoned (rewound) branches equal the MANIFEST's count; and a hand-made
parallel-call fan (Claude Code 2.x) reads as one chain, not as dead leaves."""
from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from app.core.capture.detect import detect_format
from app.core.capture.parsers.claude import parse_claude, parse_claude_with_subagents
from app.core.capture.parsers.codex import parse_codex
from app.core.capture.parsers.gemini import parse_gemini
from tests.core.capture.helpers import REAL, assistant, call, result, text, user, write

REAL2 = REAL.parent / "real-world-2"
PARSERS = {"claude-code": parse_claude_with_subagents, "codex": parse_codex, "gemini": parse_gemini}
# the only calls not on a main branch: a real rewind ("Ok I came from the future ...") - two edited prompts
REWOUND = {"b3edadab-bca0-4054-9b41-f7ffa6941260.jsonl": 2}


def _manifest() -> list[tuple[Path, str, int]]:
    with (REAL2 / "MANIFEST.tsv").open(encoding="utf-8") as fh:
        return [(REAL2 / r["local_path"], r["format"], int(re.search(r"tool_calls=(\d+)", r["notes"]).group(1)))
                for r in csv.DictReader(fh, delimiter="\t")]


def _owner(path: Path) -> Path:
    """The file capture reads for this one (a <session>/subagents/agent-*.jsonl is read with its session)."""
    if path.parent.name == "subagents":
        main = path.parent.parent.parent / f"{path.parent.parent.name}.jsonl"
        return main if main.is_file() else path
    return path


def _counts(session, out: dict[str, list[int]]) -> None:
    row = out.setdefault(str(Path(session.source_path).resolve()), [0, 0])
    row[0] += sum(len(m.tool_calls()) for m in session.messages)
    row[1] += sum(len(m.tool_calls()) for b in session.abandoned for m in b)
    for sub in session.subagents:
        _counts(sub, out)


@pytest.mark.skipif(not (REAL2 / "MANIFEST.tsv").is_file(), reason=f"shared fixtures not here ({REAL2})")
def test_every_tool_call_in_real_world_2_is_read():
    rows, per, read = _manifest(), {}, set()
    for path, fmt, _ in rows:
        main = _owner(path).resolve()
        if main not in read and not main.name.startswith("agent-acompact"):
            read.add(main)
            assert detect_format(main) == fmt, main
            _counts(PARSERS[fmt](main, final=True), per)
    wrong = []
    for path, _, expected in rows:
        on_main, apart = per.get(str(path.resolve()), [0, 0])
        if (on_main, apart) != (expected - REWOUND.get(path.name, 0), REWOUND.get(path.name, 0)):
            wrong.append(f"{path.name}: MANIFEST {expected}, main {on_main}, abandoned {apart}")
    assert not wrong, "tool calls not read as the MANIFEST counts them:\n" + "\n".join(wrong)
    assert sum(n for *_, n in rows) == 2613


def test_parallel_calls_are_one_chain_not_abandoned_branches(tmp_path):
    """A -> B (one response, two calls); R_A under A, R_B under B; the next response under R_A (written last)."""
    path = write(tmp_path / "s.jsonl",
                 user("u1", None, "look at two files"),
                 assistant("a1", "u1", [text("reading")], msg_id="m1"),
                 assistant("a2", "a1", [call("c1", "Read", file_path="x")], msg_id="m1"),
                 assistant("a3", "a2", [call("c2", "Read", file_path="y")], msg_id="m1"),
                 user("r2", "a3", [result("c2", "y body")]),
                 user("r1", "a2", [result("c1", "x body")]),
                 assistant("a4", "r1", [text("both read")], msg_id="m2"))
    s = parse_claude(path, final=True)
    assert not s.abandoned
    assert [m.role for m in s.messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [p.call_id for p in s.messages[1].tool_calls()] == ["c1", "c2"]
    assert [m.parts[0].call_id for m in s.messages[2:4]] == ["c2", "c1"]


def test_a_rewind_stays_an_abandoned_branch(tmp_path):
    """A new prompt under an earlier point (not a fan) keeps its own branch."""
    path = write(tmp_path / "s.jsonl",
                 user("u1", None, "first"),
                 assistant("a1", "u1", [call("c1", "Edit", file_path="x")], msg_id="m1"),
                 user("r1", "a1", [result("c1", "ok")]),
                 assistant("a2", "r1", [text("done")], msg_id="m2"),
                 user("u2", "a2", "old second prompt"),
                 assistant("a3", "u2", [call("c3", "Edit", file_path="y")], msg_id="m3"),
                 user("u2b", "a2", "edited second prompt"),
                 assistant("a4", "u2b", [text("fine")], msg_id="m4"))
    s = parse_claude(path, final=True)
    assert len(s.abandoned) == 1 and [p.call_id for m in s.abandoned[0] for p in m.tool_calls()] == ["c3"]
