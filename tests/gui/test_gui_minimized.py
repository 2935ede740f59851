"""GUI: `nightschool gui --minimized` starts with only the tray icon where a tray host runs (the tray's Quit then
ends the app), and shows the window, saying why, where there is none."""
from __future__ import annotations

import pytest

from app.ui.main import build_window, show


@pytest.fixture
def built(qtbot, aio, store, capture_config):
    """build_window as run_gui calls it, tray host given; torn down like make_window's windows."""
    made = []

    def build(tray: bool):
        window = build_window(store, capture_config=capture_config, watch=False, tray=tray)
        made.append(window)
        return window

    yield build
    for window in made:
        for controller in (window.queue_controller, window.capture_controller, window.datasets_controller):
            controller.stop()
        window.controller.detach()
        window.close()


def test_minimized_without_a_tray_host_shows_the_window_and_says_why(built, qtbot):
    window = built(tray=False)
    why = show(window, minimized=True)
    qtbot.waitExposed(window)
    assert window.isVisible() and "no system tray" in why


def test_minimized_with_a_tray_host_shows_only_the_icon_and_its_quit_ends_the_app(built, qtbot):
    window = built(tray=True)
    quits = []
    assert show(window, minimized=True, quit_app=lambda: quits.append(1)) == ""
    assert not window.isVisible() and window.tray.icon is not None
    window.tray.quit()  # closes the never-shown window: Qt alone would not end the app
    qtbot.waitUntil(lambda: quits == [1])
    assert not window.isVisible()


def test_the_tray_open_shows_a_minimized_window(built, qtbot):
    window = built(tray=True)
    quits = []
    show(window, minimized=True, quit_app=lambda: quits.append(1))
    window.tray.open_window()
    qtbot.waitExposed(window)
    assert window.isVisible() and quits == []


def test_a_plain_start_shows_the_window(built, qtbot):
    window = built(tray=True)
    assert show(window) == ""
    qtbot.waitExposed(window)
