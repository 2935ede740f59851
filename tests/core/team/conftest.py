"""The team tests' server: a real `nightschool team serve` subprocess on its own data dir, killed at the end."""
from __future__ import annotations

import pytest

from tests.core.team.helpers import Server


@pytest.fixture
def team(tmp_path):
    server = Server(tmp_path / "server", tmp_path / "server-config")
    server.start()
    yield server, tmp_path
    server.kill()
