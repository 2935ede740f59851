"""Ingest into the store: exactly once across re-imports, appends and restarts; balanced counts; quarantine;
project rules; every planted secret gone from the whole data dir."""
from __future__ import annotations

import json
import sqlite3

import sqlalchemy as sa

from app.core.capture.ingest import Ingestor
from app.core.capture.parsers.claude import parse_claude_with_subagents
from app.core.capture.rows import parts_of, unpack
from app.core.scrub.scrubber import Scrubber
from tests.core.capture.helpers import SID, assistant, call, result, text, user
from tests.pg import ANY_STORE, any_store  # noqa: F401 - fixture

BIG = "x" * (5 * 1024**2)  # a 5 MB tool output


def session_records() -> list[dict]:
    """Split assistant turn, a tool error, a 5 MB output, an image, an unknown record type."""
    return [
        user("u1", None, "Fix the failing test in calc.py"),
        assistant("a1", "u1", [{"type": "thinking", "thinking": "First read the file."}], msg_id="m1"),
        assistant("a2", "a1", [call("c1", "Read", file_path="/home/me/proj/calc.py")], msg_id="m1"),
        user("u2", "a2", [result("c1", "no such file", is_error=True)]),
        assistant("a3", "u2", [call("c2", "Read", file_path="/home/me/proj/src/calc.py")]),
        user("u3", "a3", [result("c2", BIG)]),
        {"type": "brand-new-record-kind", "uuid": "z1", "sessionId": SID},
        user("u4", "u3", [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}]),
        assistant("a4", "u4", [text("Fixed: the import path was wrong.")]),
    ]


def write_lines(path, records, tail: bytes = b"", crlf: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    end = b"\r\n" if crlf else b"\n"
    with path.open("ab") as fh:
        fh.write(b"".join(json.dumps(r).encode() + end for r in records) + tail)


def db(store) -> sqlite3.Connection:
    return sqlite3.connect(store.path)


def one(con, sql, *args):
    return con.execute(sql, args).fetchone()[0]


def test_import_twice_append_and_restart_store_every_record_once(store, config, roots, ingestor):
    path = roots["claude-code"] / "-home-me-proj" / f"{SID}.jsonl"
    half = json.dumps(user("u5", "a4", "and add a test")).encode()
    write_lines(path, session_records(), tail=b"\xff\xfe not utf-8 \n" + half[:30], crlf=True)

    first = ingestor.ingest(path, origin="scan", final=False)
    assert first.status == "ok" and first.balanced
    assert first.lines_in == 10 and first.quarantined == 1  # the invalid-UTF-8 line; the half line waits
    assert ingestor.ingest(path, origin="scan", final=False) is None  # nothing changed: nothing done

    with path.open("ab") as fh:  # the agent finishes the line and writes one more
        fh.write(half[30:] + b"\n" + json.dumps(assistant("a5", "u5", [text("Added test_calc.py.")])).encode() + b"\n")
    second = ingestor.ingest(path, origin="watch", final=False)
    assert (second.lines_in, second.stored, second.quarantined) == (2, 2, 0) and second.balanced

    restarted = Ingestor(store, config, Scrubber(home="/home/me"))
    assert restarted.ingest(path, origin="scan") is None

    con = db(store)
    parsed = parse_claude_with_subagents(path)
    assert one(con, "select count(*) from messages where branch = 0") == len(parsed.messages)
    assert one(con, "select count(*) from (select session_id, branch, seq from messages "
                    "group by 1, 2, 3 having count(*) > 1)") == 0
    ins = con.execute("select sum(lines_in), sum(stored), sum(quarantined), sum(skipped) from imports").fetchone()
    assert ins[0] == 12 == sum(ins[1:]) and ins[2] == one(con, "select count(*) from quarantine")
    assert one(con, "select lines from capture_files") == 12
    row = con.execute("select messages, tool_calls, errors, outcome, title, project from sessions").fetchone()
    assert row == (len(parsed.messages), 2, 1, "finished", "Fix the failing test in calc.py", "proj")


@ANY_STORE
def test_an_ingest_and_its_append_on_either_store(any_store, config, roots):
    """The ingest's writes (sessions, message rows straight to the driver, the import rows, the file's row inserted
    then updated) on SQLite and PostgreSQL: the same rows, counts balanced, each record once."""
    path = roots["claude-code"] / "-home-me-proj" / f"{SID}.jsonl"
    records = [r for r in session_records() if r.get("uuid") != "u3"]  # not the 5 MB output
    write_lines(path, records[:4])
    ingestor = Ingestor(any_store, config, Scrubber(home="/home/me"))
    first = ingestor.ingest(path, origin="scan", final=False)
    write_lines(path, records[4:])
    second = ingestor.ingest(path, origin="watch", final=False)
    assert first.balanced and second.balanced and (first.lines_in, second.lines_in) == (4, len(records) - 4)
    parsed = parse_claude_with_subagents(path)
    with any_store.engine.connect() as conn:
        got = conn.execute(sa.text("SELECT role, text, parts_z, is_error FROM messages WHERE branch = 0 ORDER BY seq"))
        assert [(r.role, r.text, parts_of(r._mapping), r.is_error) for r in got] == [
            (m.role, m.text, m.parts, int(any(p.is_error for p in m.parts))) for m in Scrubber(home="/home/me").session(
                parsed).messages]
        assert conn.execute(sa.text("SELECT lines, stored, \"offset\" FROM capture_files")).one() == (
            len(records), second.stored + first.stored, path.stat().st_size)
        assert conn.execute(sa.text("SELECT count(*), sum(lines_in) FROM imports")).one() == (2, len(records))


def test_split_assistant_lines_merge_and_tool_results_keep_errors(store, roots, ingestor):
    path = roots["claude-code"] / "p" / f"{SID}.jsonl"
    write_lines(path, session_records())
    ingestor.ingest(path, final=True)
    con = db(store)
    roles = [r[0] for r in con.execute("select role from messages where branch = 0 order by seq")]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "user", "assistant"]  # a pasted image
    assert con.execute("select count(*) from messages where parts_json != '' or parts_z is null").fetchone()[0] == 0
    merged = json.loads(unpack(one(con, "select parts_z from messages where seq = 1")))  # compressed
    assert [p["k"] for p in merged] == ["thinking", "tool_call"]  # two lines, one message
    assert one(con, "select is_error from messages where seq = 2") == 1
    assert len(unpack(one(con, "select parts_z from messages where seq = 4"))) > 5 * 1024**2
    assert one(con, "select skipped from capture_files") == 1  # the unknown record type, counted


def test_quarantine_keeps_position_reason_and_scrubbed_text(store, roots, ingestor):
    path = roots["claude-code"] / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(user("u1", None, "hi")) + "\n{not json at /home/me/secret-notes\n[1, 2]\n")
    res = ingestor.ingest(path, final=True)
    assert res.balanced and (res.lines_in, res.stored, res.quarantined) == (3, 1, 2)
    rows = db(store).execute("select line, reason, excerpt, source_path from quarantine order by line").fetchall()
    assert [r[0] for r in rows] == [2, 3]
    assert "not valid JSON" in rows[0][1] and "not a JSON object" in rows[1][1]
    assert rows[0][2] == "{not json at ~/secret-notes" and "/home/me" not in rows[0][3]


def test_a_file_that_is_no_transcript_is_refused_and_listed(store, tmp_path, ingestor):
    junk = tmp_path / "notes.jsonl"
    junk.write_text('{"hello": "world"}\n')
    res = ingestor.ingest(junk, origin="import")
    assert res.status == "refused" and "not a Claude Code, Codex CLI or Gemini CLI transcript" in res.message
    assert one(db(store), "select count(*) from quarantine where line is null") == 1


def test_a_project_rule_keeps_a_repository_out_and_purges_it(store, config, roots):
    path = roots["claude-code"] / "-home-me-proj" / f"{SID}.jsonl"
    write_lines(path, session_records()[:2])
    Ingestor(store, config).ingest(path, final=True)
    assert one(db(store), "select count(*) from sessions") == 1

    config.exclude = ["proj"]
    write_lines(path, [assistant("a9", "a1", [text("more")])])
    res = Ingestor(store, config).ingest(path, final=True)
    assert res.status == "excluded" and res.balanced and res.stored < 0  # the stored lines now count as skipped
    con = db(store)
    assert one(con, "select count(*) from sessions") == 0 and one(con, "select count(*) from messages") == 0
    assert one(con, "select stored from capture_files") == 0


def test_planted_secrets_never_reach_the_data_dir(store, roots, ingestor, ns_home):
    secrets = {"user": "AKIAIOSFODNN7EXAMPLE", "input": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
               "output": "sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345", "thinking": "hunter2-Very-Secret-99"}
    records = [
        user("u1", None, f"deploy with key {secrets['user']}"),
        assistant("a1", "u1", [{"type": "thinking", "thinking": f"the .env has PASSWORD={secrets['thinking']}"},
                               call("c1", "Bash", command=f"curl -H 'Authorization: token {secrets['input']}' x")]),
        user("u2", "a1", [result("c1", f"ANTHROPIC_API_KEY={secrets['output']}")]),
        assistant("a2", "u2", [text("done")]),
        "{broken line with " + secrets["output"],
    ]
    path = roots["claude-code"] / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    res = ingestor.ingest(path, final=True)
    assert res.status == "ok" and res.quarantined == 1
    found = [(f, name) for f in ns_home.rglob("*") if f.is_file()
             for name, value in secrets.items() if value.encode() in f.read_bytes()]
    assert found == []
    con = db(store)
    assert one(con, "select secrets_scrubbed from sessions") >= 4
    assert "<SECRET:aws_access_key>" in one(con, "select text from messages where seq = 0")
