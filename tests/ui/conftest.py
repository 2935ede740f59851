"""GUI fixtures: one qasync loop riding on pytest-qt's event processing, a window factory on the test's store, and
capture settings whose roots lie in the test's dir (no GUI test ever watches the real home)."""
from __future__ import annotations

import asyncio

import pytest


@pytest.fixture(scope="session", autouse=True)
def refguard_session(qapp):
    """The app's guard against PySide6 6.12's lost references to None/True/False (see app/ui/refguard.py)."""
    from app.ui import refguard

    timer = refguard.install(qapp)
    yield
    timer.stop()


@pytest.fixture(scope="package", autouse=True)
def gcguard_package(qapp):
    """As in the app, cycles holding Qt objects are collected on the GUI thread only (see app/ui/gcguard.py); the
    tests after these (no Qt objects) get automatic collection back."""
    from app.ui import gcguard

    gcguard.install()
    yield gcguard
    gcguard.uninstall()


@pytest.fixture(autouse=True)
def collect_after(gcguard_package):
    """Each test ends with what the app's timer would collect, here on the main thread: a test that waits without
    Qt's event loop keeps a bounded heap too."""
    yield
    gcguard_package.collect_due()


@pytest.fixture(scope="session")
def aio_session(qapp):
    """One asyncio loop for the session, driven by Qt events, so qtbot.waitUntil also runs the clients' coroutines."""
    import qasync

    loop = qasync.QEventLoop(qapp, already_running=True)
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.events._set_running_loop(None)
    asyncio.set_event_loop(None)


@pytest.fixture
def aio(aio_session, qapp):
    yield aio_session
    for task in asyncio.all_tasks(aio_session):
        task.cancel()
    qapp.processEvents()


@pytest.fixture(autouse=True)
def capture_config(tmp_path, ns_home):
    """Agent roots under the test dir, saved as the data dir's capture.json (what run_gui loads in a child process)."""
    from app.core.capture.sources import CaptureConfig

    base = tmp_path / "agents"
    roots = {"claude-code": base / ".claude" / "projects", "codex": base / ".codex" / "sessions",
             "gemini": base / ".gemini" / "tmp"}
    for path in roots.values():
        path.mkdir(parents=True)
    config = CaptureConfig(roots={agent: [str(path)] for agent, path in roots.items()})
    ns_home.mkdir(parents=True, exist_ok=True)
    config.save(ns_home / "capture.json")
    return config


@pytest.fixture
def make_window(qtbot, aio, store, capture_config):
    """Build a main window on the test's store (as the app would on start-up); capture does not watch unless asked."""
    from app.ui.main import build_window
    from tests.conftest import fast_hyper

    made = []

    def make(watch: bool = False, **hyper):
        window = build_window(store, capture_config=capture_config, watch=watch)
        window.controller.hyper = fast_hyper(**hyper)
        window.show()
        made.append(window)
        return window

    yield make
    for window in made:  # no scheduler, watcher or follower of this test outlives it (they share threads)
        for controller in (window.queue_controller, window.capture_controller, window.datasets_controller):
            if controller is not None:
                controller.stop()
        window.controller.detach()
        window.close()
