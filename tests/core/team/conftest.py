"""The team tests' server: a real `nightschool team serve` subprocess on its own data dir, killed at the end —
`team_pg` with the team school's store on a real PostgreSQL (tests/pg.py; SQLite, said, where none is installed)."""
from __future__ import annotations

import pytest

from tests.core.team.helpers import Server


def _serving(tmp_path, database: str | None = None):
    server = Server(tmp_path / "server", tmp_path / "server-config", database)
    server.start()
    return server


@pytest.fixture
def team(tmp_path):
    server = _serving(tmp_path)
    yield server, tmp_path
    server.kill()


@pytest.fixture
def team_pg(tmp_path, request):
    try:
        database = request.getfixturevalue("pg_url")
    except pytest.skip.Exception as exc:  # no PostgreSQL here: the same test on SQLite rather than none
        print(f"the team school runs on SQLite: {exc}")
        database = None
    server = _serving(tmp_path, database)
    yield server, tmp_path
    server.kill()
