"""Where the student is connected and how much work it did there (issue 42, part 4): `ship/connect/work.at_work` on a
fresh HOME with Codex connected (a real config write) and real Codex rollouts captured — the student's own (served
name), a mixed one and the teacher's: per 7 days, the sessions it acted in, only its own tool calls, the answers the
server recorded and how many were flagged; `school status` says it in one line."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.cli.main import main
from app.core.base import paths
from app.core.capture.ingest import Ingestor
from app.core.capture.sources import CaptureConfig
from app.core.experience import buffer, config
from app.core.scrub.scrubber import Scrubber
from app.core.ship.connect import connection, work
from app.core.ship.serving import SERVED_MODEL
from tests.core.capture.rollouts import MIXED, MIXED_NAME, STUDENT, TEACHER, rollout


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    user = tmp_path / "user"
    user.mkdir()
    monkeypatch.setenv("HOME", str(user))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    return user


def test_at_work_counts_what_the_student_did_where_it_is_connected(store, home, tmp_path, capsys):
    assert work.at_work(store)["connected"] == []
    assert not (paths.data_dir() / "connect").exists(), "reading where the student works wrote a folder"
    connection.connect("codex", check=False)
    folder = tmp_path / "codex"
    ingestor = Ingestor(store, CaptureConfig(roots={"codex": [str(folder)]}), Scrubber(home="/home/me"))
    for path in (rollout(TEACHER, folder), rollout(STUDENT, folder, SERVED_MODEL),
                 rollout(MIXED, folder, SERVED_MODEL, from_request=2, name=MIXED_NAME)):
        assert ingestor.ingest(path, agent="codex", final=True).status == "ok"

    mixed_week = work.at_work(store, now=datetime(2025, 10, 22, tzinfo=UTC))
    assert [c["agent"] for c in mixed_week["connected"]] == ["codex"]
    assert (mixed_week["sessions"], mixed_week["tool_calls"]) == (1, 10)  # its 10 calls, not the teacher's 8
    own_week = work.at_work(store, now=datetime(2025, 11, 25, tzinfo=UTC))
    assert own_week["by_agent"] == {"codex": {"sessions": 1, "tool_calls": 3}}
    assert work.at_work(store, now=datetime(2026, 3, 1, tzinfo=UTC))["sessions"] == 0  # the teacher's week: none

    config.set_buffer(store, "enabled", True)
    now = datetime.now(UTC)
    for i, reasons in enumerate(([], [{"kind": "client", "text": "the client marked the answer bad"}])):
        buffer.record(store, buffer.Recorded(id=f"served-{i}", request={"messages": []}, answer={"content": "ok"},
                                             model=SERVED_MODEL, created_at=now - timedelta(days=1), reasons=reasons))
    served = work.at_work(store)
    assert (served["answers"], served["flagged"], served["buffer"]) == (2, 1, True)
    line = work.words(served)
    assert line == ("The student at work, last 7 days: connected to Codex CLI; 0 captured sessions (0 tool calls), "
                    "2 answers served, 1 flagged")

    assert main(["school", "status"]) == 0
    assert line in capsys.readouterr().out
    assert main(["school", "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["at_work"]["answers"] == 2


def test_an_unreadable_capture_json_is_said_not_fatal(store, home):
    from app.core.base import paths

    (paths.data_dir() / "capture.json").write_text("{not json", encoding="utf-8")
    reading = work.read(store)
    assert "capture settings" in reading["error"] and work.words(reading).startswith("The student at work: unknown")
