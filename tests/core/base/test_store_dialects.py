"""The store on both dialects: SQLite (the solo default) and a real PostgreSQL server started by the test session
(tests/pg.py) — the same migrations, the same guarantees (triggers), exclusive claims, and `store migrate`."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import func, inspect, select, text
from sqlalchemy.exc import IntegrityError

from app.core.base.schema import (CheckpointRow, CycleRow, Deployment, EvalRow, ExportRow, Job, MessageRow, Promotion,
                                  Run, AgentSession, Setting, VerdictRow)
from app.core.capture.rows import pack_parts, parts_of
from tests.pg import ANY_STORE, any_store  # noqa: F401 - fixture (pg_server, pg_url: tests/conftest.py)

PARTS_OLD = '[{"k":"tool_call","n":"Bash","i":{"command":"ls"},"c":"call_1"}]'  # a row written before 0014

ROOT = Path(__file__).resolve().parents[3]


def head() -> str:
    from alembic.script import ScriptDirectory

    from app.core.base.store import MIGRATIONS, alembic_config

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def a_job(s, job_id: str, position: float = 0.0, state: str = "queued") -> None:
    s.add(Job(id=job_id, kind="sft", state=state, priority="normal", dataset_path="/d.jsonl", dataset_sha256="d" * 64,
              model_ref="default", spec_path="/spec.json", spec_sha256="s" * 64, position=position))


def a_checkpoint(store, job_id: str = "job-1") -> tuple[int, int]:
    with store.session() as s:
        a_job(s, job_id, state="running")
        s.flush()
        run = Run(job_id=job_id, run_dir="/x", socket_path="/x/s", state="running")
        s.add(run)
        s.flush()
        ck = CheckpointRow(run_id=run.id, step=3, kind="adapter", path="/x/ck")
        s.add(ck)
        s.flush()
        return run.id, ck.id


@ANY_STORE
def test_the_migrations_make_the_orm_tables_and_the_guarantees(any_store):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from app.core.base.schema import Base

    with any_store.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head()
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert [d for d in diff if d[0] not in ("remove_index", "add_index")] == []
    # a run completes only after its checkpoint; a checkpoint is promoted and deployed only with a passing verdict
    with any_store.session() as s:
        a_job(s, "job-0", state="running")
        s.flush()
        bare = Run(job_id="job-0", run_dir="/x", socket_path="/x/s", state="running")
        s.add(bare)
        s.flush()
        bare_id = bare.id
    with pytest.raises(IntegrityError, match="only after its checkpoint is registered"):
        with any_store.session() as s:
            s.get(Run, bare_id).state = "completed"
    run_id, ck_id = a_checkpoint(any_store)
    with any_store.session() as s:
        s.get(Run, run_id).state = "completed"
        ev = EvalRow(base_model="default", label="x", eval_set="t", eval_set_sha256="a" * 64,
                     settings_sha256="b" * 64, report_path="/r")
        s.add(ev)
        s.flush()
        failed = VerdictRow(checkpoint_id=ck_id, eval_id=ev.id, verdict="fail", reasons_json="[]",
                            thresholds_json="{}")
        export = ExportRow(checkpoint_id=ck_id, base_model="default", label="x", key="k", path="/e")
        s.add_all([failed, export])
        s.flush()
        ev_id, failed_id, export_id = ev.id, failed.id, export.id
    with pytest.raises(IntegrityError, match="only with a passing verdict"):
        with any_store.session() as s:
            s.add(Promotion(base_model="default", checkpoint_id=ck_id, verdict_id=failed_id, action="promote"))
    with pytest.raises(IntegrityError, match="only with a passing verdict"):
        with any_store.session() as s:
            s.add(Deployment(export_id=export_id, file="/f.gguf", quant="q4", sha256="f" * 64, checkpoint_id=ck_id,
                             base_model="default", action="deploy"))
    with any_store.session() as s:
        passed = VerdictRow(checkpoint_id=ck_id, eval_id=ev_id, verdict="pass", reasons_json="[]",
                            thresholds_json="{}")
        s.add(passed)
        s.flush()
        s.add(Promotion(base_model="default", checkpoint_id=ck_id, verdict_id=passed.id, action="promote"))
        s.add(Deployment(export_id=export_id, file="/f.gguf", quant="q4", sha256="f" * 64, checkpoint_id=ck_id,
                         base_model="default", action="deploy"))


@ANY_STORE
def test_alembic_upgrades_a_populated_database(any_store):
    """Back to 0004 (the queue), rows written there, then up to head again: the rows survive every revision."""
    from alembic import command

    from app.core.base.store import alembic_config

    cfg = alembic_config(any_store.url)
    with any_store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0004")
    with any_store.engine.begin() as conn:
        conn.execute(text("INSERT INTO jobs (id, kind, state, priority, dataset_path, dataset_sha256, model_ref, "
                          "spec_path, spec_sha256, records, created_at, updated_at, position, source) VALUES "
                          "('old-job', 'sft', 'queued', 'normal', '/d', 'd', 'default', '/s', 's', 3, "
                          ":t, :t, 1, 'user')"), {"t": "2026-01-01 00:00:00"})
        conn.execute(text("INSERT INTO sessions (id, agent, native_id, source_path, updated_at, messages) VALUES "
                          "('sess-1', 'claude', 'n1', '/a/s.jsonl', :t, 1)"), {"t": "2026-01-01 00:00:00"})
        conn.execute(text("INSERT INTO messages (session_id, role, text) VALUES ('sess-1', 'user', 'hello')"))
        conn.execute(text("INSERT INTO settings (key, value) VALUES ('queue.paused', 'false')"))
    with any_store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    with any_store.session() as s:
        assert s.get(Job, "old-job").records == 3 and s.get(AgentSession, "sess-1").agent == "claude"
        assert s.scalar(select(MessageRow.text)) == "hello" and s.get(Setting, "queue.paused").value == "false"
        assert s.scalar(text("SELECT version_num FROM alembic_version")) == head()


@ANY_STORE
def test_settings_upsert_and_the_change_watch(any_store):
    from app.core.base import settings

    settings.put(any_store, "k", {"a": 1})
    settings.put(any_store, "k", {"a": 2})
    assert settings.get(any_store, "k") == {"a": 2}
    watch = any_store.watch("SELECT max(id) FROM jobs")
    try:
        assert not watch.changed()
        settings.put(any_store, "other", 1)  # another table: the version moves, the mark does not
        assert not watch.changed()
        with any_store.session() as s:
            a_job(s, "job-w")
        assert watch.changed() and not watch.changed()
    finally:
        watch.close()


@ANY_STORE
def test_a_queued_job_is_claimed_once_and_within_the_limit(any_store):
    from app.core.queue.scheduler import LAUNCHING, Queue

    with any_store.session() as s:
        for i in range(3):
            a_job(s, f"job-{i}", position=i)
    queue = Queue(any_store, inbox=False)
    assert queue._claim("job-0", limit=1) and not queue._claim("job-0", limit=1)  # once
    assert not queue._claim("job-1", limit=1)  # one busy already
    queue.set_max_concurrent(2)
    assert queue._claim_next() == "job-1" and queue._claim_next() is None
    with any_store.session() as s:
        assert s.scalar(select(func.count()).select_from(Job).where(Job.state == LAUNCHING)) == 2


@ANY_STORE
def test_a_cycle_and_its_stage_are_claimed_once(any_store):
    from app.core.runtime.school import cycles

    first, created = cycles.start(any_store, "default", "test", {})
    again, created_again = cycles.start(any_store, "default", "test", {})
    assert created and not created_again and again.id == first.id
    stale = first  # two processes holding the same copy enter the stage: one starts it, the other resumes
    entered, resumed = cycles.begin_stage(any_store, stale, "building")
    later, resumed_later = cycles.begin_stage(any_store, stale, "building")
    assert (resumed, resumed_later) == (False, True)
    assert later.starts == {"building": 1} and later.resumes == {"building": 1}
    with any_store.session() as s:
        assert s.scalar(select(func.count()).select_from(CycleRow)) == 1


CLAIMER = textwrap.dedent("""
    import json, sys
    from app.core.base.store import Store
    from app.core.queue.scheduler import Queue
    store = Store(sys.argv[1])
    queue = Queue(store, inbox=False)
    print("ready", flush=True)
    sys.stdin.readline()  # both start claiming at once
    got = []
    while (job := queue._claim_next()) is not None:
        got.append(job)
    print(json.dumps(got), flush=True)
""")


def test_two_processes_claiming_one_postgresql_queue_never_take_the_same_job(pg_url, ns_home):
    from app.core.base import settings
    from app.core.base.store import Store
    from app.core.queue.scheduler import CONCURRENT_KEY

    store = Store(pg_url)
    jobs = [f"job-{i:02d}" for i in range(40)]
    with store.session() as s:
        for i, job in enumerate(jobs):
            a_job(s, job, position=i)
    settings.put(store, CONCURRENT_KEY, 30)  # a limit below the count: it must hold across the two processes
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, pg_url], cwd=ROOT, text=True, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE) for _ in range(2)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    got = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    taken = got[0] + got[1]
    assert len(taken) == len(set(taken)) == 30, got  # never the same job twice; never past the limit
    assert taken and set(taken) <= set(jobs)
    store.close()


def populated(store) -> None:
    from app.core.base import settings

    run_id, ck_id = a_checkpoint(store)
    with store.session() as s:
        s.get(Run, run_id).state = "completed"
        ev = EvalRow(base_model="default", label="x", eval_set="t", eval_set_sha256="a" * 64,
                     settings_sha256="b" * 64, report_path="/r")
        s.add(ev)
        s.flush()
        passed = VerdictRow(checkpoint_id=ck_id, eval_id=ev.id, verdict="pass", reasons_json="[]",
                            thresholds_json="{}")
        s.add(passed)
        s.flush()
        s.add(Promotion(base_model="default", checkpoint_id=ck_id, verdict_id=passed.id, action="promote"))
        for i in range(3):
            s.add(AgentSession(id=f"sess-{i}", agent="claude", native_id=f"n{i}", source_path=f"/a/{i}.jsonl",
                               messages=2, title=f"session {i} — ünïcode"))
        s.flush()
        for i in range(3):  # the parts compressed (bytes: bytea on PostgreSQL), and one row of the old form
            for j in range(2):
                parts = {"parts_json": PARTS_OLD} if (i, j) == (2, 1) else pack_parts(
                    [{"k": "text", "t": f"message {j} of {i} — ünïcode \x1c\x1d\x1e"}] * j)
                s.add(MessageRow(session_id=f"sess-{i}", seq=j, role="user" if j == 0 else "assistant",
                                 text=f"message {j} of {i}", **parts))
        s.add(CycleRow(base_model="default", stage="building", state="done", outputs_json='{"building": {}}'))
    settings.put(store, "school.policy", {"min_sessions": 3})


def test_store_migrate_moves_a_populated_solo_store_to_postgresql(ns_home, pg_url, capsys, monkeypatch):
    from app.cli.main import main
    from app.core.base.store import URL_ENV, Store

    monkeypatch.delenv(URL_ENV, raising=False)  # the solo store: the data dir's file

    solo = Store()
    populated(solo)
    solo.close()
    assert main(["store", "migrate", "--to", pg_url]) == 0
    said = capsys.readouterr().out
    assert "every count equal and every sampled row the same" in said, said
    for table, n in (("messages", 6), ("sessions", 3), ("promotions", 1), ("settings", 1), ("cycles", 1)):
        assert any(line.split()[:3] == [table, str(n), str(n)] and line.endswith("ok") for line in said.splitlines()), \
            (table, said)
    team, solo = Store(pg_url), Store()
    with solo.session() as s, team.session() as t:  # the parts read the same, either form
        mine = [parts_of(r) for r in s.scalars(select(MessageRow).order_by(MessageRow.id))]
        theirs = t.scalars(select(MessageRow).order_by(MessageRow.id)).all()
        assert [parts_of(r) for r in theirs] == mine and mine[1][0].text == "message 1 of 0 — ünïcode \x1c\x1d\x1e"
        assert mine[5][0].tool_name == "Bash" and theirs[5].parts_z is None and isinstance(theirs[1].parts_z, bytes)
    solo.close()
    with team.session() as s:  # ids go on after the copied ones
        s.add(MessageRow(session_id="sess-0", seq=9, role="user", text="after the move", parts_json="[]"))
        s.flush()
        assert s.scalar(select(func.max(MessageRow.id))) == 7
        assert s.get(AgentSession, "sess-1").title == "session 1 — ünïcode"
    team.close()
    assert main(["store", "migrate", "--to", pg_url]) == 2  # the target now holds a store: refused
    err = capsys.readouterr().err
    assert "is not empty" in err and "Name a new, empty database" in err, err


def test_the_named_postgresql_store_is_passed_on_without_its_password(pg_url, ns_home, monkeypatch):
    """NIGHTSCHOOL_DATABASE_URL picks the store; other processes are told its URL without the password (a worker's
    spec file, the model server's command line) and find the password where this process did."""
    from app.core.base.store import URL_ENV, Store, StoreError, store_address

    named = pg_url.replace("postgres@", "postgres:sekrit@")
    monkeypatch.setenv(URL_ENV, named)
    store = Store()
    assert store.postgres and store.path is None and "sekrit" in store.url
    assert "sekrit" not in store.where and "sekrit" not in store_address() and store.where == store_address()
    again = Store(store.where)
    assert again.url == store.url
    again.close()
    store.close()
    monkeypatch.setenv(URL_ENV, "mysql://x@y/z")
    with pytest.raises(StoreError, match="is not a PostgreSQL URL") as refused:
        Store()
    assert "unset NIGHTSCHOOL_DATABASE_URL" in str(refused.value)
