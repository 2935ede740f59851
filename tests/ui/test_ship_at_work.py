"""GUI (offscreen): the Ship tab's "Use it in…" box says where the student is connected and what it did there this
week — a real Codex config written by connect on a fresh HOME, a real Codex rollout of the student's captured (its
end moved into this week)."""
from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import update

from app.core.base.schema import AgentSession
from app.core.capture.ingest import Ingestor
from app.core.capture.sources import CaptureConfig
from app.core.scrub.scrubber import Scrubber
from app.core.ship.connect import connection
from app.core.ship.serving import SERVED_MODEL
from tests.core.capture.rollouts import STUDENT, rollout

WAIT_MS = 15_000


def test_the_use_it_in_box_says_what_the_student_did_where_it_is_connected(qtbot, store, tmp_path, monkeypatch):
    from app.ui.ship.controller import ShipController
    from app.ui.ship.panel import ShipPanel

    (tmp_path / "user").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    connection.connect("codex", check=False)
    folder = tmp_path / "codex"
    ingestor = Ingestor(store, CaptureConfig(roots={"codex": [str(folder)]}), Scrubber(home="/home/me"))
    done = ingestor.ingest(rollout(STUDENT, folder, SERVED_MODEL), agent="codex", final=True)
    with store.session() as s:
        s.execute(update(AgentSession).where(AgentSession.id == done.sessions[0])
                  .values(ended_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")))

    panel = ShipPanel(ShipController(store))
    qtbot.addWidget(panel)
    panel.show()
    box = panel.use_in
    qtbot.waitUntil(lambda: "captured session" in box.work.text(), timeout=WAIT_MS)
    assert box.work.text().startswith("The student at work, last 7 days: connected to Codex CLI; "
                                      "1 captured session (3 tool calls)")
    assert box.states["codex"].text() == "connected"
