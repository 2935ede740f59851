"""GUI: the tray icon. Under a real X server with a tray host (Xvfb + trayer, in a subprocess on the xcb platform:
the main pytest process runs offscreen) the window's icon is embedded, a finished cycle is notified with its summary,
and clicking the notification shows the window; the tray process's icon (`nightschool tray`, a viewer of another
runtime over its status channel) notifies, says paused while paused and "not running" when the runtime stops; and a
real window started with a tray host starts the tray process, which outlives it once the daemon took over. Without a
tray host (offscreen) the window's banner says the notifications; a second tray process in a session exits."""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
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
    out = subprocess.run([sys.executable, "-m", "pytest", f"{__file__}::test_tray_in_x",
                          f"{__file__}::test_session_tray_in_x", "-q", "-p", "no:cacheprovider"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "2 passed" in out.stdout, out.stdout[-4000:] + out.stderr[-2000:]


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
    qtbot.waitUntil(lambda: tray.icon.toolTip().startswith("Nightschool — idle ("), timeout=WAIT_MS)
    assert tray.state == "idle" and tray.icon.toolTip().endswith("\nRuns in this window")
    assert [a.text() for a in tray.menu.actions() if a.text() and a is not tray.state_action] == [
        "Open Nightschool", "Run a cycle now", "Pause learning", "Quit"]

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


# --- the tray process -------------------------------------------------------------------------------------------
@pytest.mark.skipif(os.environ.get(CHILD) != "1",
                    reason="runs in the X subprocess started by test_the_tray_under_a_real_tray_host")
def test_session_tray_in_x(qtbot, qapp, store):
    """The tray process's icon views a runtime over its status channel (here one started in this process: the tray
    cannot tell): a NOTIFY event is notified, paused says paused, a stopped runtime says "not running"."""
    from PySide6.QtWidgets import QSystemTrayIcon

    from app.core.runtime.school.facade import School
    from app.core.runtime.supervisor import Runtime
    from app.ui.tray.process import build_tray

    qtbot.waitUntil(QSystemTrayIcon.isSystemTrayAvailable, timeout=WAIT_MS)
    runtime = Runtime(role="window", store=store, capture=False, keeper=False).start()
    tray = build_tray(store)
    try:
        assert tray.school.link.mode == "viewer" and tray.school.link.runtime is None  # never its own runtime
        qtbot.waitUntil(lambda: tray.icon.geometry().width() > 0, timeout=WAIT_MS)  # embedded in the tray host
        qtbot.waitUntil(lambda: tray.icon.toolTip().startswith("Nightschool — idle ("), timeout=WAIT_MS)
        assert f"Runs in the window (pid {os.getpid()})" in tray.icon.toolTip() and tray.state == "idle"
        assert not tray.start_action.isVisible()
        assert [a.text() for a in tray.menu.actions() if a.text() and a.isVisible()][1:] == [
            "Open Nightschool", "Run a cycle now", "Pause learning", "Quit tray"]

        shown = []
        original = tray.icon.showMessage
        tray.icon.showMessage = lambda *args: (shown.append(args), original(*args))
        runtime.bus.publish("cycle.done", cycle=3, stage="deploying", reason="", summary=SUMMARY)
        qtbot.waitUntil(lambda: len(shown) == 1, timeout=WAIT_MS)
        assert shown[0][:2] == ("Cycle 3 finished", SUMMARY)

        School(store).pause()
        tray.school.refresh()
        qtbot.waitUntil(lambda: tray.icon.toolTip().startswith("Nightschool — paused"), timeout=WAIT_MS)
        assert tray.state == "paused" and tray.pause_action.text() == "Resume learning"
        assert tray.state_action.text() == "Paused"

        runtime.stop()
        qtbot.waitUntil(lambda: tray.state == "off", timeout=WAIT_MS)
        assert tray.icon.toolTip().startswith("Nightschool — not running") and tray.start_action.isVisible()
        assert not tray.run_action.isEnabled()
    finally:
        runtime.stop()
        tray.school.stop()
        tray.school.link.stop()
        tray.hide()


def _tray_pid(home: Path) -> int | None:
    """The pid in the data dir's tray session lock (whatever the child's session key), None before one is written."""
    for path in (home / "runtime").glob("tray-*.lock"):
        text = path.read_text().strip()
        if text:
            return int(text)
    return None


def _wait(condition, timeout_s: float, what: str, alive=None):
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if alive is not None and not alive():
            raise AssertionError(f"gone while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return value


GUI_CHILD = """
from PySide6.QtCore import QTimer
from app.core.base import paths
from app.ui.main import run_gui

LOG = paths.data_dir() / "logs" / "tray.out"

def ready(window):
    print("own icon", window.tray.icon is not None, "runs the school", window.runtime is not None, flush=True)
    window.ask_keep_learning = lambda: True  # the person answers Yes: keep learning in the background

    def close_once_the_tray_follows():  # the tray process it started says it follows this window's runtime
        if LOG.exists() and "runs in the window" in LOG.read_text():
            window.close_asking()  # as the window's close button does
        else:
            QTimer.singleShot(50, close_once_the_tray_follows)
    close_once_the_tray_follows()

raise SystemExit(run_gui(ready))
"""


def test_closing_the_window_leaves_the_tray_process_on_the_daemon(x_display, ns_home):
    """A real `nightschool gui` with a tray host starts the tray process (and shows no icon of its own); closed with
    "keep learning", it hands the school to the daemon and exits; the tray process stays and follows the daemon."""
    from app.core.runtime.machinery import lock

    env = {**os.environ, "QT_QPA_PLATFORM": "xcb", "DISPLAY": x_display, "NIGHTSCHOOL_HOME": str(ns_home)}
    env.pop("WAYLAND_DISPLAY", None)
    tray_pid = daemon_pid = None
    try:
        out = subprocess.run([sys.executable, "-c", GUI_CHILD], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=120, check=False)
        tray_pid = _tray_pid(ns_home)
        holder = lock.holder()
        daemon_pid = holder["pid"] if holder else None
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
        assert "own icon False runs the school True" in out.stdout  # the tray process shows the school, not it
        assert tray_pid and holder and holder["role"] == "daemon", (tray_pid, holder)
        log = ns_home / "logs" / "tray.out"
        said = f"Nightschool — idle (0 of 50 new sessions for the next cycle) — runs in the daemon (pid {daemon_pid})"
        _wait(lambda: log.exists() and said in log.read_text(), 60, "the tray to follow the daemon",
              alive=lambda: psutil.pid_exists(tray_pid))
        assert "runs in the window (pid" in log.read_text()  # it followed the window's runtime before
        assert psutil.Process(tray_pid).status() != psutil.STATUS_ZOMBIE
        second = subprocess.run([sys.executable, "-m", "app.cli.main", "tray"], cwd=REPO, env=env, check=False,
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 0 and f"one already runs in this session (pid {tray_pid})" in second.stdout
    finally:
        for pid in (tray_pid, daemon_pid):
            if pid and psutil.pid_exists(pid):
                os.kill(pid, signal.SIGTERM)
                psutil.Process(pid).wait(timeout=30)


# --- without an X server --------------------------------------------------------------------------------------
def test_the_tray_icon_is_the_app_icon_with_a_state_badge(qapp):
    from PySide6.QtGui import QColor, QImage

    from app.core.desktop.entries import PNG_DIR
    from app.ui.tray.icon import STATES, state_icons

    icons = state_icons()
    app_icon = QImage(str(PNG_DIR / "48.png"))
    for name, (colour, _glyph) in STATES.items():
        image = icons[name].pixmap(48, 48).toImage()
        assert image.size().width() == 48
        if name != "off":  # the app's own pixels where the badge is not (a plain dot is transparent there)
            assert all(image.pixelColor(x, y) == app_icon.pixelColor(x, y) for x, y in ((10, 10), (24, 8), (6, 30)))
        badge = image.pixelColor(48 - 12, 48 - 12)  # the badge's centre
        if name not in ("approval", "error", "paused"):  # (a glyph there)
            assert badge == QColor(colour), (name, badge.name())
    off = icons["off"].pixmap(48, 48).toImage().pixelColor(10, 10)
    assert off.saturation() == 0 and off.alpha() == 255  # not running: the icon in grey


def test_the_tray_says_the_real_state():
    from app.ui.school.words import tray_state, tray_tooltip

    status = {"paused": True, "cycle": None, "next": {"new_sessions": 2, "needed": 10}}
    assert tray_state(status) == "paused" and tray_state(status, running=False) == "off"
    assert tray_tooltip("paused", status) == "Nightschool — paused"
    training = {"cycle": {"id": 3, "stage": "training", "state": "running"}}
    progress = {"cycle": 3, "stage": "training", "step": 42, "total": 100}
    assert tray_state(training) == "training"
    assert tray_tooltip("training", training, progress, where="runs in the daemon (pid 7)") == (
        "Nightschool — training cycle 3 (42 %)\nRuns in the daemon (pid 7)")
    waiting = {"cycle": {"id": 4, "stage": "deploying", "state": "approval"}}
    assert tray_state(waiting) == "approval"
    assert tray_tooltip("approval", waiting) == "Nightschool — cycle 4 waits for your approval"
    assert tray_tooltip("idle", {"cycle": None, "next": {"new_sessions": 2, "needed": 10}}) == (
        "Nightschool — idle (2 of 10 new sessions for the next cycle)")
    assert tray_tooltip("off", None).startswith("Nightschool — not running\nNothing learns")


def test_the_trays_open_raises_the_running_window(qtbot):
    """The tray's Open knocks at the running window's door (a local socket of this data dir) before starting one."""
    from app.ui.window_door import WindowDoor, door_name, knock

    assert not knock()  # no window: the tray starts one
    opened = []
    door = WindowDoor(lambda: opened.append(1))
    try:
        assert door.listening and Path(door_name()).exists()
        assert not WindowDoor(lambda: None).listening  # a second window leaves the door to the first
        assert knock()
        qtbot.waitUntil(lambda: opened == [1])
    finally:
        door.close()
    assert not Path(door_name()).exists() and not knock()


def test_a_second_tray_process_in_a_session_exits(ns_home):
    """One tray per login session and data dir: a second `nightschool tray` says one runs and exits 0 (offscreen: the
    lock is taken before any display is needed)."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "NIGHTSCHOOL_HOME": str(ns_home)}
    first = subprocess.Popen([sys.executable, "-m", "app.cli.main", "tray"], cwd=REPO, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait(lambda: _tray_pid(ns_home) == first.pid, 60, "the first tray's lock", alive=lambda: first.poll() is None)
        second = subprocess.run([sys.executable, "-m", "app.cli.main", "tray"], cwd=REPO, env=env, check=False,
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 0, second.stderr[-2000:]
        assert f"one already runs in this session (pid {first.pid}): not starting another" in second.stdout
        assert first.poll() is None
    finally:
        first.terminate()
        first.wait(timeout=30)
