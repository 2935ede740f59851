"""Team page: not a member — a join form (the server's URL, the invitation's token, masked); a member — the server,
the outbox, the last push's outcome, Push now, Withdraw my sessions (after a confirmation that says what happens), and
the team school: its state, the deployed student, the last verdict, sessions per member (counts). An unreachable
server is shown as "offline since …", never as a dialog. A view: it reads the TeamController and calls its commands."""
from __future__ import annotations

import time

from PySide6.QtWidgets import (
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QMessageBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.ui.kit import BAD_STYLE, DIM_STYLE, GOOD_STYLE, WARN_STYLE, arrange, button, fill, label, make_table
from app.ui.team.controller import TeamController
from app.ui.team.words import (
    WITHDRAW_TEXT,
    WITHDRAW_TITLE,
    deployed_words,
    member_rows,
    members_words,
    offline_words,
    outbox_words,
    school_state,
    verdict_words,
)
from widgets.banner import Banner

JOIN_HINT = ("Join a team's school: your captured sessions (scrubbed, as the datasets are) go to its server, which "
             "trains one student for the whole team. The server's keeper gives you its address and a token "
             "(`nightschool team invite NAME` on the server).")
MEMBERS_PX = 420  # the counts table's widest
OUTCOME_STYLE = {"sent": GOOD_STYLE, "partly": WARN_STYLE, "offline": WARN_STYLE, "refused": BAD_STYLE,
                 "failed": BAD_STYLE}


class TeamPanel(QWidget):
    def __init__(self, controller: TeamController, parent=None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.banner = Banner()
        self.pages = QStackedWidget()
        self.pages.addWidget(self._join_page())
        self.pages.addWidget(self._member_page())
        arrange(QVBoxLayout(self), self.banner, self.pages)
        controller.changed.connect(self.refresh)
        controller.message.connect(self.show_message)
        controller.busy_changed.connect(self._on_busy)
        self.refresh()

    # --- layout ----------------------------------------------------------------------------------------
    def _join_page(self) -> QWidget:
        box = QGroupBox("Join a team")
        self.url_edit = QLineEdit()
        self.url_edit.setPlaceholderText("http://school.example.org:8790")
        self.token_edit = QLineEdit()
        self.token_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.token_edit.setPlaceholderText("the token `nightschool team invite` printed")
        self.join_button = button("Join", self.join, "Keep the address and the token (the keyring, else a private "
                                                     "file) and read the team's school")
        form = QFormLayout()
        form.addRow("Server URL", self.url_edit)
        form.addRow("Token", self.token_edit)
        row = arrange(QHBoxLayout(), self.join_button, 1)
        arrange(QVBoxLayout(box), label(JOIN_HINT, DIM_STYLE), form, row)
        page = QWidget()
        arrange(QVBoxLayout(page), box, 1, margins=(0, 0, 0, 0))
        return page

    def _member_page(self) -> QWidget:
        server = QGroupBox("Team server")
        self.server_line = label(selectable=True)
        self.connection = label()
        self.outbox = label()
        self.last_push = label()
        self.push_button = button("Push now", self.controller.push, "Send the sessions captured since the last push "
                                  "(scrubbed) and whatever the outbox still holds")
        self.withdraw_button = button("Withdraw my sessions…", self.withdraw, "Delete every session you sent from "
                                      "the team's store and from every dataset it builds from now on")
        buttons = arrange(QHBoxLayout(), self.push_button, self.withdraw_button, 1)
        arrange(QVBoxLayout(server), self.server_line, self.connection, self.outbox, self.last_push, buttons)
        school = QGroupBox("Team school")
        self.state_line, self.deployed_line, self.verdict_line = label(), label(selectable=True), label()
        self.members = make_table(["Member", "Sessions"], stretch=0)
        self.members.setMaximumWidth(MEMBERS_PX)
        self.members_head = label("", DIM_STYLE)
        self.as_of = label("", WARN_STYLE)
        arrange(QVBoxLayout(school), self.as_of, self.state_line, self.deployed_line, self.verdict_line,
                self.members_head, self.members)
        page = QWidget()
        arrange(QVBoxLayout(page), server, school, 1, margins=(0, 0, 0, 0))
        return page

    # --- showing the state -------------------------------------------------------------------------------
    def refresh(self) -> None:
        view = self.controller.view
        self.pages.setCurrentIndex(1 if view.member else 0)
        if view.member:
            self.token_edit.clear()  # kept by the join: not left in the form
            self._show_server()
            self._show_school()
        self._on_busy(self.controller.busy)

    def _show_server(self) -> None:
        c, view = self.controller, self.controller.view
        self.server_line.setText(f"Server: {view.url or '(no token kept: join again)'}")
        if view.status is not None:
            self.connection.setText("Connected: the server answers.")
            self.connection.setStyleSheet(GOOD_STYLE)
            self.connection.setToolTip("")
        elif view.refused:
            self.connection.setText(view.problem)
            self.connection.setStyleSheet(BAD_STYLE)
            self.connection.setToolTip("")
        else:
            self.connection.setText(offline_words(c.offline_since, view.files))
            self.connection.setStyleSheet(WARN_STYLE)
            self.connection.setToolTip(view.problem)
        self.outbox.setText(outbox_words(view.files, view.sessions))
        if c.last_push is None:
            self.last_push.setText("Last push: none from this window yet.")
            self.last_push.setStyleSheet(DIM_STYLE)
        else:
            outcome, words, when = c.last_push
            self.last_push.setText(f"Last push ({time.strftime('%H:%M', time.localtime(when))}): {words}.")
            self.last_push.setStyleSheet(OUTCOME_STYLE.get(outcome, ""))

    def _show_school(self) -> None:
        """The team school as the server last answered (dated while it is offline)."""
        c = self.controller
        status = c.view.status or c.last_status
        stale = c.view.status is None and status is not None
        self.as_of.setVisible(stale)
        if stale:
            self.as_of.setText(f"As the server answered at {time.strftime('%H:%M', time.localtime(c.last_read_at))}:")
        verdict = verdict_words(status) if status is not None else ""
        self.state_line.setText(f"State: {school_state(status)}" if status is not None
                                else "The team school's state shows when the server answers.")
        self.deployed_line.setText(f"Deployed student: {deployed_words(status)}")
        self.deployed_line.setVisible(status is not None)
        self.verdict_line.setText(f"Last verdict: {verdict}")
        self.verdict_line.setVisible(bool(verdict))
        rows = member_rows(status)
        fill(self.members, rows)
        self.members.setMaximumHeight(self.members.horizontalHeader().sizeHint().height()
                                      + sum(self.members.rowHeight(r) for r in range(len(rows))) + 4)
        self.members.setVisible(bool(rows))
        count = (status or {}).get("members")
        self.members_head.setText(members_words(count, len(rows)) if status is not None else "")
        self.members_head.setVisible(status is not None)

    def _on_busy(self, busy: bool) -> None:
        self.join_button.setEnabled(not busy)
        self.push_button.setEnabled(not busy)
        self.withdraw_button.setEnabled(not busy and self.controller.view.status is not None)

    # --- commands -------------------------------------------------------------------------------------
    def join(self) -> None:
        self.controller.join(self.url_edit.text(), self.token_edit.text())

    def withdraw(self) -> None:
        if self.confirm(WITHDRAW_TITLE, WITHDRAW_TEXT):
            self.controller.withdraw()

    def confirm(self, title: str, text: str) -> bool:
        answer = QMessageBox.question(self, title, text)
        return answer == QMessageBox.StandardButton.Yes

    def show_message(self, level: str, text: str) -> None:
        self.banner.show_message(level, text)

