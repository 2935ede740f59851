"""GUI (offscreen): File ▸ Quit holds the standard Quit key; Ctrl+Q asks the close question, Cancel keeps the window
open, Yes hands the school to a daemon and No stops it — as closing the window does (one path: close_asking)."""
from __future__ import annotations

import sys

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtTest import QTest

from app.core.runtime.machinery import lock
from tests.ui.test_school_panel import STAND_IN_DAEMON, WAIT_MS, handed_over


def ctrl_q(qtbot, window) -> None:
    """The person presses Ctrl+Q in the (active) window: a real key event, matched by Qt's shortcut map."""
    qtbot.waitUntil(window.isActiveWindow, timeout=WAIT_MS)
    QTest.keyClick(window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)


def test_the_file_menu_holds_quit_with_the_standard_key(qtbot):
    from app.ui.main_window import MainWindow

    window = MainWindow()  # the bare window `nightschool gui` paints first has it too
    qtbot.addWidget(window)
    file_menu = window.menuBar().actions()[0].menu()
    assert file_menu.title() == "&File" and file_menu.actions() == [window.quit_action]
    quit_action = window.quit_action
    assert quit_action.text() == "&Quit" and quit_action.menuRole() == QAction.MenuRole.QuitRole
    standard = QKeySequence.keyBindings(QKeySequence.StandardKey.Quit)  # none offscreen: Ctrl+Q stands in
    assert quit_action.shortcuts() == (standard or [QKeySequence("Ctrl+Q")])
    assert QKeySequence("Ctrl+Q") in quit_action.shortcuts()
    assert quit_action in window.actions()  # the window holds it: it fires with the menu bar hidden


def test_ctrl_q_asks_cancel_keeps_the_window_open_and_yes_hands_over(qtbot, make_window):
    window = make_window()
    window.ask_on_close = True
    answers, asked = iter([None, True]), []  # Cancel, then Yes: keep learning in the background
    window.ask_keep_learning = lambda: asked.append(1) or next(answers)
    ctrl_q(qtbot, window)
    qtbot.waitUntil(lambda: asked == [1], timeout=WAIT_MS)
    assert window.isVisible() and not window.runtime.stopping.is_set() and window.handover is None

    window.menuBar().hide()  # no menu bar: the window's own action still answers the key
    window.daemon_command = [sys.executable, "-c", STAND_IN_DAEMON]
    ctrl_q(qtbot, window)
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=WAIT_MS)
    with handed_over(window):
        assert asked == [1, 1]


def test_ctrl_q_no_stops_the_school(qtbot, make_window):
    window = make_window()
    window.ask_on_close = True
    asked = []
    window.ask_keep_learning = lambda: asked.append(1) or False
    ctrl_q(qtbot, window)
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=WAIT_MS)
    assert asked == [1] and window.handover is None
    assert window.runtime.stopping.is_set() and lock.holder() is None
