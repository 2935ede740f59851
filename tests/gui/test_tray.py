"""GUI: the tray icon. Under a real X server with a tray host (Xvfb + trayer, in a subprocess on the xcb platform:
the main pytest process runs offscreen) the icon is embedded, a finished cycle is notified with its summary, and
clicking the notification shows the window; without a tray host (offscreen) the window's banner says it instead."""
from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHILD = "NIGHTSCHOOL_TRAY_CHILD"  # set in the X subprocess: the test that needs the tray host runs there
PACKAGES = ["xvfb", "trayer", "libxcb-icccm4", "libxcb-keysyms1", "libxcb-cursor0"]
WAIT_MS = 20_000
SUMMARY = "cycle 3, held-out loss 1.900 → 1.500, agreement 0.400 → 0.550, gate: pass"


def _have_x_tools() -> bool:
    return shutil.which("Xvfb") is not None and shutil.which("trayer") is not None


def _install_x_tools() -> str:
    """apt-get install the X server and the tray host where we may; '' or why not."""
    if shutil.which("apt-get") is None:
        return "apt-get is not available"
    if os.geteuid() != 0:
        return "installing packages needs root"
    out = subprocess.run(["apt-get", "install", "-y", "-q", *PACKAGES], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if out.returncode != 0:
        return f"apt-get install failed: {out.stderr.strip()[-300:]}"
    return ""


def _display_number(fd: int, proc: subprocess.Popen, timeout_s: float = 30.0) -> str:
    """Xvfb -displayfd writes the display number once it accepts connections."""
    data = b""
    while not data.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], timeout_s)
        if not ready or proc.poll() is not None:
            raise RuntimeError("Xvfb did not start")
        chunk = os.read(fd, 64)
        if not chunk:
            raise RuntimeError("Xvfb closed its display fd")
        data += chunk
    return data.decode().strip()


@pytest.fixture(scope="session")
def x_display():
    """An X server (Xvfb, its own free display) with a system tray host (trayer); skipped only where they cannot be
    installed."""
    if not _have_x_tools():
        why = _install_x_tools()
        if not _have_x_tools():
            pytest.skip(f"Xvfb and trayer are not installed and could not be: {why or 'not found after install'}")
    read_fd, write_fd = os.pipe()
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
                            pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write_fd)
    try:
        display = ":" + _display_number(read_fd, xvfb)
    finally:
        os.close(read_fd)
    trayer = subprocess.Popen(["trayer", "--edge", "top", "--align", "right", "--widthtype", "request",
                               "--height", "24", "--SetDockType", "true"], env={**os.environ, "DISPLAY": display},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield display
    for proc in (trayer, xvfb):
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_the_tray_under_a_real_tray_host(x_display):
    env = {**os.environ, "QT_QPA_PLATFORM": "xcb", "DISPLAY": x_display, CHILD: "1"}
    env.pop("WAYLAND_DISPLAY", None)
    out = subprocess.run([sys.executable, "-m", "pytest", f"{__file__}::test_tray_in_x", "-q", "-p",
                          "no:cacheprovider"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout[-4000:] + out.stderr[-2000:]


@pytest.mark.skipif(os.environ.get(CHILD) != "1",
                    reason="runs in the X subprocess started by test_the_tray_under_a_real_tray_host")
def test_tray_in_x(qtbot, qapp, make_window):
    from PySide6.QtWidgets import QSystemTrayIcon

    assert qapp.platformName() == "xcb"
    qtbot.waitUntil(QSystemTrayIcon.isSystemTrayAvailable, timeout=WAIT_MS)  # trayer took the tray selection
    window = make_window()
    tray = window.tray
    assert tray.available and tray.icon is not None and tray.icon.isVisible()
    qtbot.waitUntil(lambda: tray.icon.geometry().width() > 0, timeout=WAIT_MS)  # embedded in the tray host
    assert tray.state == "idle" and tray.icon.toolTip() == "Nightschool: idle"
    assert [a.text() for a in tray.menu.actions() if a.text()] == ["Open Nightschool", "Run a cycle now",
                                                                   "Pause learning", "Quit"]

    shown = []
    original = tray.icon.showMessage
    tray.icon.showMessage = lambda *args: (shown.append(args), original(*args))
    window.runtime.bus.publish("cycle.done", cycle=3, stage="deploying", reason="", summary=SUMMARY)
    qtbot.waitUntil(lambda: len(shown) == 1, timeout=WAIT_MS)
    title, text, icon, _ms = shown[0]
    assert title == "Cycle 3 finished" and text == SUMMARY and icon == QSystemTrayIcon.MessageIcon.Information
    assert window.banner.isHidden()  # the tray said it

    window.runtime.bus.publish("cycle.refused", cycle=4, stage="judging", reason="agreement fell below the base's",
                               summary="")
    qtbot.waitUntil(lambda: len(shown) == 2, timeout=WAIT_MS)
    assert shown[1][0] == "Cycle 4: the gate refused the model" and shown[1][1] == "agreement fell below the base's"
    window.runtime.bus.publish("cycle.failed", cycle=5, stage="training", reason="training failed: out of memory")
    window.runtime.bus.publish("stage.failed", cycle=5, stage="training", reason="training failed: out of memory")
    qtbot.waitUntil(lambda: tray.state == "error", timeout=WAIT_MS)
    assert len(shown) == 3 and shown[2][0] == "Cycle 5 failed at training"  # the stage's failure is not said twice

    # clicking the notification brings the window back, on the School tab
    window.tabs.setCurrentWidget(window.training)
    window.hide()
    assert not window.isVisible()
    tray.icon.messageClicked.emit()
    qtbot.waitUntil(window.isVisible, timeout=WAIT_MS)
    assert window.tabs.currentWidget() is window.school


def test_without_a_tray_host_the_window_banner_says_it(qtbot, make_window):
    from PySide6.QtWidgets import QSystemTrayIcon

    if QSystemTrayIcon.isSystemTrayAvailable():
        pytest.skip("this display has a tray host")
    window = make_window()
    assert window.tray.icon is None and not window.tray.available
    window.runtime.bus.publish("cycle.done", cycle=3, stage="deploying", reason="", summary=SUMMARY)
    qtbot.waitUntil(lambda: SUMMARY in window.banner.text(), timeout=WAIT_MS)
    assert window.banner.isVisible() and window.banner.text().startswith("Cycle 3 finished")
    window.runtime.bus.publish("approval.waiting", cycle=4, checkpoint=9, reasons=["agreement +0.05"])
    qtbot.waitUntil(lambda: "waits for your approval" in window.banner.text(), timeout=WAIT_MS)
    assert "checkpoint #9 passed the gate (agreement +0.05)" in window.banner.text()
    window.runtime.bus.publish("alert.fatal", job="j1", kind="nan", message="loss is NaN at step 4")
    qtbot.waitUntil(lambda: "Training stopped: nan" in window.banner.text(), timeout=WAIT_MS)
    assert "loss is NaN at step 4" in window.banner.text() and window.tray.state == "error"
