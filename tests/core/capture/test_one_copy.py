"""One transcript, one session: a file is known by its resolved path (`..`, symlinks), a session by the agent's own id
when the file is named by it (a copy elsewhere), and store upgrade 0010 merges the duplicates earlier versions stored
(same file under two spellings, copies of one session) with every reference re-pointed and the counts balanced."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from alembic import command
from sqlalchemy import create_engine, insert

from app.core.base.schema import AgentSession, CaptureFile, ImportRow, MessageRow, utcnow
from app.core.base.store import Store, alembic_config
from app.core.capture import rows
from app.core.capture.ingest import Ingestor, session_key
from app.core.capture.parsers.claude import parse_claude_with_subagents
from app.core.capture.prepare import counts_of as _counts, group_files as _group_files
from app.core.scrub.scrubber import Scrubber
from tests.core.capture.helpers import SID, assistant, text, user, write

LIVE = "aaaaaaaa-1111-2222-3333-444444444444"  # a second agent session id, for the copies


def records(n: int, sid: str = SID, ask: str = "Fix calc") -> list[dict]:
    """n records of one session (a user question, then answers and follow-ups)."""
    out, parent = [user("u0", None, ask, sessionId=sid)], "u0"
    for i in range(1, n):
        uid = f"r{i}"
        out.append(assistant(uid, parent, [text(f"step {i}")], sessionId=sid) if i % 2 else
                   user(uid, parent, f"and {i}", sessionId=sid))
        parent = uid
    return out


def tops(con) -> list[str]:
    return [r[0] for r in con.execute("select id from sessions where parent_id is null order by id")]


def balanced(con) -> bool:
    lines, stored, quarantined, skipped = con.execute(
        "select sum(lines_in), sum(stored), sum(quarantined), sum(skipped) from imports").fetchone()
    held = con.execute("select coalesce(sum(stored), 0) from capture_files").fetchone()[0]
    return lines == stored + quarantined + skipped and stored == held


# --- ingest ------------------------------------------------------------------------------------------------------
def test_two_spellings_and_a_symlinked_folder_are_one_file(store, tmp_path, ingestor):
    real = write(tmp_path / "b" / f"{SID}.jsonl", *records(4))
    (tmp_path / "a").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "b")
    spellings = [tmp_path / "a" / ".." / "b" / real.name, real, tmp_path / "linked" / real.name]

    first = ingestor.ingest(spellings[0], origin="import", final=True)
    assert first.status == "ok" and first.path == real.resolve()
    assert [ingestor.ingest(p, origin="import", final=True) for p in spellings[1:]] == [None, None]
    assert ingestor.ingest_many(spellings, origin="import", final=True) == [None, None, None]

    con = sqlite3.connect(store.path)
    assert tops(con) == [session_key("claude-code", real.resolve())]  # a single spelling keeps its id
    assert [r[0] for r in con.execute("select path from capture_files")] == [str(real.resolve())]
    assert balanced(con)


def test_a_copy_of_a_named_session_file_is_the_same_session(store, tmp_path, ingestor):
    live = write(tmp_path / "live" / f"{LIVE}.jsonl", *records(4, LIVE))
    backup = write(tmp_path / "backup" / f"{LIVE}.jsonl", *records(2, LIVE))  # an older copy

    assert ingestor.ingest(live, origin="watch", final=True).status == "ok"
    older = ingestor.ingest(backup, origin="import", final=True)
    assert older.status == "copy" and (older.stored, older.skipped) == (0, 2) and older.balanced
    con = sqlite3.connect(store.path)
    (sid,) = tops(con)
    assert one(con, "select messages from sessions where id = ?", sid) == 4

    write(backup, *records(6, LIVE))  # the copy is now the fuller one: it takes over, the other's lines are skipped
    fuller = ingestor.ingest(backup, origin="import", final=True)
    assert fuller.status == "ok" and fuller.sessions == [sid] and fuller.balanced
    assert tops(con) == [sid] and one(con, "select messages from sessions where id = ?", sid) == 6
    assert balanced(con)


def test_files_that_do_not_carry_the_id_in_their_name_stay_apart(store, tmp_path, ingestor):
    """Hand-named exports (or a resumed session's inherited ids) share a session id without being one session."""
    write(tmp_path / "x.jsonl", *records(4, ask="One"))
    write(tmp_path / "y.jsonl", *records(4, ask="Other"))
    ingestor.ingest_many([tmp_path / "x.jsonl", tmp_path / "y.jsonl"], origin="import", final=True)
    assert len(tops(sqlite3.connect(store.path))) == 2


# --- upgrade 0010 ------------------------------------------------------------------------------------------------
def one(con, sql, *args):
    return con.execute(sql, args).fetchone()[0]


def old_ingest(engine, spelling: Path) -> str:
    """What the code before 0010 stored for a file named by this spelling: the session keyed by the spelling as
    given (absolute, not resolved), its messages, the followed file under that spelling, a balanced import."""
    main = Path(spelling).absolute()
    session = parse_claude_with_subagents(main, final=True)
    Scrubber(home="/home/me").session(session)
    sid = session_key("claude-code", main)
    sessions, messages = rows.session_rows(sid, session)
    messages = [{**{k: v for k, v in m.items() if k != "parts_z"}, "parts_json": rows.parts_text(m)}
                for m in messages]  # the parts as JSON text (0014 compresses them)
    sessions = [{k: v for k, v in s.items() if k not in ("models", "actor")} for s in sessions]  # 0017 adds them
    counts = {f: _counts("claude-code", s) for f, s in _group_files(main, session).items()}
    with engine.begin() as conn:
        conn.execute(insert(AgentSession), sessions)
        conn.execute(insert(MessageRow), messages)
        for file, c in counts.items():
            stat = file.stat()
            conn.execute(insert(CaptureFile).values(
                path=str(file), agent="claude-code", session_id=sid, offset=c.offset, size=stat.st_size,
                mtime=stat.st_mtime, lines=c.lines, stored=c.stored, quarantined=c.quarantined, skipped=c.skipped,
                updated_at=utcnow()))
            conn.execute(insert(ImportRow).values(
                origin="scan", kind="transcript", agent="claude-code", path=str(file), lines_in=c.lines,
                stored=c.stored, quarantined=c.quarantined, skipped=c.skipped, created_at=utcnow()))
    return sid


def store_with_duplicates(db_path: Path, tmp_path: Path) -> dict[str, str]:
    """A store at revision 0009 holding what the old code stored twice (and references to both copies)."""
    url, existed = f"sqlite:///{db_path}", db_path.exists()
    engine = create_engine(url)
    with engine.begin() as conn:
        cfg = alembic_config(url)
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0009") if existed else command.upgrade(cfg, "0009")
    real = write(tmp_path / "b" / f"{SID}.jsonl", *records(3))
    (tmp_path / "a").mkdir(exist_ok=True)
    (tmp_path / "linked").symlink_to(tmp_path / "b")
    ids = {"dotted": old_ingest(engine, tmp_path / "a" / ".." / "b" / real.name)}
    write(real, *records(5))  # the agent went on; the next read came through the symlinked folder
    ids["linked"] = old_ingest(engine, tmp_path / "linked" / real.name)
    ids["backup"] = old_ingest(engine, write(tmp_path / "backup" / f"{LIVE}.jsonl", *records(2, LIVE)))
    ids["live"] = old_ingest(engine, write(tmp_path / "live" / f"{LIVE}.jsonl", *records(4, LIVE)))
    ids["x"] = old_ingest(engine, write(tmp_path / "x.jsonl", *records(4, ask="One")))
    ids["y"] = old_ingest(engine, write(tmp_path / "y.jsonl", *records(4, ask="Other")))
    engine.dispose()
    con = sqlite3.connect(db_path)
    con.execute("insert into built_datasets (id, name, kind, base_model, fingerprint, spec_id, template_sha256, path, "
                "mode, manifest_json, created_at) values (1, 'd1', 'sft', 'm', 'f', 's', 't', '/d', 'full', '{}', "
                "'2026-01-01')")
    for sid in (ids["dotted"], ids["linked"], ids["backup"]):
        con.execute("insert into dataset_sessions (dataset_id, session_id, split, examples, content_sha256) "
                    "values (1, ?, 'train', 2, 'h')", (sid,))
    con.execute("insert into heldout (base_model, session_id, frozen_at) values ('m', ?, '2026-01-01')",
                (ids["backup"],))
    con.execute("insert into heldout (base_model, session_id, frozen_at) values ('m2', ?, '2026-01-01')",
                (ids["live"],))
    con.execute("insert into session_marks (session_id, weight, note, created_at) values (?, 0, 'bad', "
                "'2026-01-01')", (ids["backup"],))
    con.execute("insert into cycles (id, base_model, stage, state, outputs_json, started_at, updated_at) values "
                "(1, 'm', 'building', 'done', ?, '2026-01-01', '2026-01-01')",
                (json.dumps({"building": {"sessions": [ids["backup"]]}}),))
    con.commit()
    con.close()
    return ids


def test_upgrade_merges_the_duplicates_old_versions_stored(ns_home, tmp_path, config):
    db_path = ns_home / "nightschool.db"
    db_path.parent.mkdir(parents=True, exist_ok=True)
    ids = store_with_duplicates(db_path, tmp_path)
    con = sqlite3.connect(db_path)
    assert len(tops(con)) == 6
    messages_before = one(con, "select count(*) from messages")
    con.close()

    store = Store()  # opening the store upgrades it
    con = sqlite3.connect(db_path)
    assert tops(con) == sorted([ids["linked"], ids["live"], ids["x"], ids["y"]])  # the fuller copies stay
    assert one(con, "select messages from sessions where id = ?", ids["linked"]) == 5
    assert one(con, "select messages from sessions where id = ?", ids["live"]) == 4
    assert one(con, "select count(*) from messages") == messages_before - 3 - 2  # the dropped copies' messages
    assert one(con, "select count(*) from messages where session_id not in (select id from sessions)") == 0
    assert one(con, "select count(*) from messages where parts_z is null or parts_json != ''") == 0  # 0014
    paths = [r[0] for r in con.execute("select path from capture_files order by path")]
    assert len(paths) == 5 and all(Path(p).resolve() == Path(p) for p in paths)
    assert one(con, "select session_id from capture_files where path like ?", f"%/backup/{LIVE}.jsonl") == ids["live"]
    assert [r[0] for r in con.execute("select session_id from dataset_sessions order by id")] == \
        [ids["linked"], ids["linked"], ids["live"]]
    assert sorted(con.execute("select base_model, session_id from heldout").fetchall()) == \
        [("m", ids["live"]), ("m2", ids["live"])]
    assert con.execute("select session_id, weight from session_marks").fetchall() == [(ids["live"], 0.0)]
    assert ids["live"] in one(con, "select outputs_json from cycles") and ids["backup"] not in \
        one(con, "select outputs_json from cycles")
    merge = con.execute("select lines_in, stored, skipped, message from imports where origin = 'merge'").fetchone()
    assert merge[:3] == (0, -5, 5) and "2 duplicate sessions merged" in merge[3]  # 3 dotted + 2 backup lines
    assert balanced(con)

    # the files read again under every spelling: nothing new, no session added
    ingestor = Ingestor(store, config, Scrubber(home="/home/me"))
    spellings = [tmp_path / "a" / ".." / "b" / f"{SID}.jsonl", tmp_path / "linked" / f"{SID}.jsonl",
                 tmp_path / "b" / f"{SID}.jsonl", tmp_path / "backup" / f"{LIVE}.jsonl"]
    ingestor.ingest_many(spellings, origin="import", final=True)
    assert len(tops(con)) == 4 and balanced(con)
    store.close()
