"""Store: Alembic creates the tables, WAL is on, the data dir follows NIGHTSCHOOL_HOME."""
from __future__ import annotations

import sqlite3

from app.core.base import paths
from app.core.train.modelref import ModelRefError, check_model_ref


def test_migrated_schema_and_wal(store, ns_home):
    assert store.path == ns_home / "nightschool.db" and paths.data_dir() == ns_home
    con = sqlite3.connect(store.path)
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    assert {"jobs", "runs", "checkpoints", "alembic_version", "sessions", "messages", "capture_files", "imports",
            "quarantine", "datasets", "built_datasets", "dataset_sessions", "heldout", "cycles", "session_marks"} <= tables
    assert con.execute("pragma journal_mode").fetchone()[0] == "wal"
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from app.core.base.store import MIGRATIONS

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(config).get_current_head()  # one head: no two migrations from one parent
    assert head >= "0013" and con.execute("select version_num from alembic_version").fetchone()[0] == head


def test_the_orm_tables_match_the_migrations(store):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from app.core.base.schema import Base

    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert [d for d in diff if d[0] not in ("remove_index", "add_index")] == []


def test_reopening_is_idempotent(store):
    """Opening a migrated store again migrates nothing and sees what the first one wrote."""
    from app.core.base import settings
    from app.core.base.store import Store

    settings.put(store, "test.reopened", 7)
    con = sqlite3.connect(store.path)
    head = con.execute("select version_num from alembic_version").fetchone()[0]
    again = Store(store.path)
    try:
        assert settings.get(again, "test.reopened") == 7
        assert con.execute("select version_num from alembic_version").fetchall() == [(head,)]
    finally:
        again.close()
        con.close()


def test_socket_path_stays_short(tmp_path):
    deep = tmp_path / ("d" * 120)
    assert len(str(paths.socket_path(deep, "job-1"))) <= 107


def test_model_refs(tmp_path):
    assert check_model_ref("default") == "embedded"
    assert check_model_ref("HuggingFaceTB/SmolLM2-360M-Instruct") == "hub"
    folder = tmp_path / "notamodel"
    folder.mkdir()
    (folder / "readme.txt").write_text("hi")
    try:
        check_model_ref(str(folder))
    except ModelRefError as exc:
        assert "no config.json" in str(exc)
    else:
        raise AssertionError("a folder without config.json was accepted")


def test_the_everyday_capture_reads_use_their_indexes(store):
    """0013: a re-stored session's request keys are found by session (not by scanning every key); the per-day chart's
    newest days come off the counts' key index; the newest sessions off (parent_id, started_at)."""
    con = sqlite3.connect(store.path)

    def plan(sql: str) -> str:
        return " | ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + sql))

    assert "USING INDEX ix_request_keys_session_id" in plan("DELETE FROM request_keys WHERE session_id IN ('a', 'b')")
    assert "ix_capture_counts_key" in plan("SELECT DISTINCT day FROM capture_counts WHERE root = 1 AND day IS NOT "
                                           "NULL ORDER BY day DESC LIMIT 90")
    newest = plan("SELECT * FROM sessions WHERE parent_id IS NULL ORDER BY started_at DESC LIMIT 200")
    assert "ix_sessions_root_started" in newest and "TEMP B-TREE" not in newest
    assert "session_tools" not in {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
