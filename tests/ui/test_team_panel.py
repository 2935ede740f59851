"""GUI (offscreen): a member's window against a real team server subprocess on loopback — the Team page joins (a bad
address refused with what / why / fix), Push now sends a captured session (the server's /v1/status counts it), the
page shows the team school's status, Withdraw (confirmed) deletes the member's sessions there; the School tab shows
"Team school at URL" and its Run now is off; a revoked token is said (push: refused); the server stopped → the page
says offline, no dialog. The tray's change
detector notifies once per newly deployed team checkpoint (pure on dicts; the Qt part on a stand-in status)."""
from __future__ import annotations

import json
import urllib.request

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QDialog

from app.core.base import settings
from tests.core.datasets.helpers import ingest, write_session
from tests.core.team.helpers import Server, cli as _cli

WAIT_MS = 20_000


def _status(server: Server, token: str) -> dict:
    """GET /v1/status as the member (the server may require the token)."""
    request = urllib.request.Request(f"{server.url}/v1/status", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def team_server(tmp_path):
    server = Server(tmp_path / "server", tmp_path / "server-config")
    server.start()
    yield server
    server.kill()


@pytest.fixture
def invited(team_server, monkeypatch):
    """An invitation for "alice"; the token also in NIGHTSCHOOL_TEAM_TOKEN (no keyring is touched)."""
    done = _cli(team_server.env, "team", "invite", "alice", "--json")
    assert done.returncode == 0, done.stderr
    token = json.loads(done.stdout)["token"]
    monkeypatch.setenv("NIGHTSCHOOL_TEAM_TOKEN", token)
    return token


def _no_dialog() -> bool:
    return not any(isinstance(w, QDialog) and w.isVisible() for w in QApplication.topLevelWidgets())


def _join(qtbot, panel, url: str, token: str) -> None:
    panel.url_edit.setText(url)
    panel.token_edit.setText(token)
    qtbot.mouseClick(panel.join_button, Qt.MouseButton.LeftButton)


def test_a_member_joins_pushes_reads_the_team_school_and_sees_it_go_offline(
        qtbot, make_window, store, tmp_path, team_server, invited, monkeypatch):
    folder = tmp_path / "transcripts"
    for i in range(2):
        write_session(folder, i)
    ingest(store, folder)
    window = make_window()
    panel, team = window.team, window.team_controller
    qtbot.waitUntil(lambda: team.reads >= 1, timeout=WAIT_MS)
    assert panel.pages.currentIndex() == 0 and not window.school.team_line.isVisible()

    _join(qtbot, panel, "school.example.org", invited)  # no scheme: refused, with why and what to do
    qtbot.waitUntil(lambda: "Not joined" in panel.banner.text(), timeout=WAIT_MS)
    assert "is not a server address" in panel.banner.text() and "Pass the URL" in panel.banner.text()

    _join(qtbot, panel, team_server.url, invited)
    qtbot.waitUntil(lambda: team.view.member and team.view.status is not None, timeout=WAIT_MS)
    assert panel.pages.currentIndex() == 1 and panel.token_edit.text() == ""
    assert team_server.url in panel.server_line.text() and panel.connection.text().startswith("Connected")
    assert "none yet" in panel.deployed_line.text()

    qtbot.mouseClick(panel.push_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: team.last_push is not None, timeout=WAIT_MS)
    assert team.last_push[0] == "sent", team.last_push
    assert _status(team_server, invited)["sessions_per_member"] == {"alice": 2}
    qtbot.waitUntil(lambda: panel.members.rowCount() == 1 and panel.members.item(0, 1).text() == "2",
                    timeout=WAIT_MS)
    assert panel.members.item(0, 0).text() == "alice" and "Outbox: empty" in panel.outbox.text()

    school = window.school  # the School tab reads the team school
    tabs = window.tabs
    tabs.setCurrentWidget(school)
    qtbot.waitUntil(lambda: school.team_line.isVisible(), timeout=WAIT_MS)
    assert school.team_line.text().startswith(f"Team school at {team_server.url}: ")
    assert "student none yet" in school.team_line.text()
    assert not school.run_button.isEnabled() and "the team's server runs its school" in school.run_button.toolTip()

    asked: list[str] = []
    monkeypatch.setattr(panel, "confirm", lambda title, text: asked.append(text) or True)
    panel.withdraw_button.click()
    qtbot.waitUntil(lambda: panel.banner.text().startswith("Withdrawn"), timeout=WAIT_MS)
    assert "deletes them from its store" in asked[0] and "no dataset it builds from now on" in asked[0]
    assert "already built" in asked[0]
    assert _status(team_server, invited)["sessions_per_member"] == {}

    revoked = _cli(team_server.env, "team", "revoke", "alice")
    assert revoked.returncode == 0, revoked.stderr
    panel.push_button.click()  # withdrawn: everything goes again, and the revoked token is refused, spool kept
    qtbot.waitUntil(lambda: team.last_push is not None and team.last_push[0] == "refused", timeout=WAIT_MS)
    assert panel.banner.text().startswith("Not pushed — the team's server refused") and _no_dialog()
    assert "new invitation" in panel.last_push.text()
    qtbot.waitUntil(lambda: "1 file (2 sessions) waiting" in panel.outbox.text(), timeout=WAIT_MS)

    team_server.kill()
    team.refresh()
    qtbot.waitUntil(lambda: team.offline and panel.connection.text().startswith("Offline since"), timeout=WAIT_MS)
    assert panel.connection.text().endswith(", 1 file spooled.") and _no_dialog()
    assert "Offline since" in school.team_line.text()


def test_the_deploy_watch_says_each_new_team_checkpoint_once():
    from app.ui.team.words import DeployWatch

    def status(checkpoint):
        return {"school": {"student": {"base_model": "tiny", "deployed_checkpoint": checkpoint}}}

    watch = DeployWatch()
    assert watch.see(status(3)) is None  # the first read is what is deployed, not news
    assert watch.see(status(3)) is None
    assert watch.see(None) is None  # unreachable: no change
    said = watch.see({"deployed": {"checkpoint": 5, "model": "tiny", "verdict": "gate: pass"}, "school": {}})
    assert said == "The team's new student is deployed: checkpoint #5 of tiny (gate: pass)"
    assert watch.see({"deployed": {"checkpoint_id": 5}}) is None
    assert watch.see(status(None)) is None  # a rollback to the base model: nothing new to announce
    assert watch.see(status(7)).endswith("checkpoint #7 of tiny")


def test_the_tray_notifies_a_member_once_per_new_team_student(qtbot, store):
    from app.ui.school.controller import SchoolController
    from app.ui.team.controller import TeamReader, TeamView, tray_poll_ms
    from app.ui.tray.icon import Tray

    assert tray_poll_ms(store) == 120_000
    settings.put(store, "team.tray_poll_s", 30)
    assert tray_poll_ms(store) == 30_000

    answers = [3, 3, None, 5, 5]  # the deployed checkpoint each read finds; None: the server is down

    def stand_in_team_read() -> TeamView:
        """A stand-in for member.team_status over a team whose server deploys checkpoint 5 between two reads."""
        checkpoint = answers.pop(0)
        if checkpoint is None:
            return TeamView(member=True, url="http://team.test", problem="the team's server cannot be reached")
        return TeamView(member=True, url="http://team.test",
                        status={"school": {"student": {"deployed_checkpoint": checkpoint}}})

    class QuietTray(Tray):  # no icon: the notifications are said `elsewhere`
        def open_window(self) -> None: ...
        def quit(self) -> None: ...

    school = SchoolController(store)
    team = TeamReader(refresh_ms=60_000, read=stand_in_team_read)
    school.follow_team(team)
    tray = QuietTray(None, school, available=False)
    for reads in range(1, 6):
        team.refresh()
        qtbot.waitUntil(lambda n=reads: team.reads == n, timeout=WAIT_MS)
        if reads == 3:
            assert "Team school at http://team.test: Offline since" in tray.tooltip()
    assert tray.notices == [("The team's new student is deployed", "checkpoint #5", "info")]
    assert tray.tooltip().endswith("Team school at http://team.test: idle, student checkpoint #5")
    team.stop()
    school.stop()
