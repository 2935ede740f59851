"""A real PostgreSQL for the store tests: one server per test session (pytest-postgresql's pg_ctl executor in a
temporary dir), a fresh database per test. `pg_url` gives a test its database's URL; `any_store` is a Store on
SQLite or on PostgreSQL (parametrise with ANY_STORE). Skips, saying why, where no PostgreSQL server is installed."""
from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest

ANY_STORE = pytest.mark.parametrize("any_store", ["sqlite", "postgresql"], indirect=True)
_names = itertools.count(1)


def find_pg_ctl() -> str | None:
    """pg_ctl on PATH (this machine: /usr/local/bin), else Debian's /usr/lib/postgresql/<v>/bin, newest first."""
    found = shutil.which("pg_ctl")
    if found:
        return found
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    return debian[-1] if debian else None


def _as_user(pg_ctl: str, folder: Path) -> str:
    """PostgreSQL refuses to run as root: there, pg_ctl runs as the `postgres` user (Debian's package makes it; else
    `nobody`) through a wrapper, and the server's folder is theirs."""
    if os.geteuid() != 0:
        return pg_ctl
    name = "postgres" if _has_user("postgres") else "nobody"
    user = pwd.getpwnam(name)
    os.chown(folder, user.pw_uid, user.pw_gid)
    wrapper = folder / "pg_ctl"
    wrapper.write_text(f'#!/bin/sh\nexec runuser -u {name} -- "{pg_ctl}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@pytest.fixture(scope="session")
def pg_server():
    """One PostgreSQL server for the session (started on a free port, stopped and removed at the end)."""
    pg_ctl = find_pg_ctl()
    if pg_ctl is None:
        pytest.skip("no PostgreSQL server here (pg_ctl not on PATH nor under /usr/lib/postgresql): "
                    "apt-get install postgresql (.ci/run does)")
    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install -e '.[dev]'")
    from port_for import select_random
    from pytest_postgresql.executors import PostgreSQLExecutor

    folder = Path(tempfile.mkdtemp(prefix="ns-pg-"))
    executable = _as_user(pg_ctl, folder)
    port = select_random()
    server = PostgreSQLExecutor(executable=executable, host="127.0.0.1", port=port, datadir=str(folder / "data"),
                                unixsocketdir=str(folder), logfile=str(folder / "postgresql.log"), startparams="-w",
                                dbname="nightschool", user="postgres",
                                postgres_options="-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server):
    """A fresh, empty database on the session's server (dropped after the test)."""
    from pytest_postgresql.janitor import DatabaseJanitor

    name = f"t{os.getpid()}_{next(_names)}"
    with DatabaseJanitor(user=pg_server.user, host=pg_server.host, port=pg_server.port, dbname=name,
                         version=pg_server.version):
        yield f"postgresql+psycopg://{pg_server.user}@{pg_server.host}:{pg_server.port}/{name}"


@pytest.fixture
def any_store(request, ns_home):
    """A migrated Store: the data dir's SQLite file, or a fresh PostgreSQL database (request.param)."""
    from app.core.base import paths
    from app.core.base.store import Store

    where = request.getfixturevalue("pg_url") if request.param == "postgresql" else paths.db_path()
    store = Store(where)
    yield store
    store.close()
