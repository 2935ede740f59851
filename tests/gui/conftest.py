"""GUI fixtures: one qasync loop riding on pytest-qt's event processing, and a window factory on the test's store."""
from __future__ import annotations

import asyncio

import pytest


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


@pytest.fixture
def make_window(qtbot, aio, store):
    """Build a main window on the test's store (as the app would on start-up)."""
    from app.ui.main import build_window
    from tests.conftest import fast_hyper

    def make(**hyper):
        window = build_window(store)
        window.controller.hyper = fast_hyper(**hyper)
        qtbot.addWidget(window)
        window.show()
        return window

    return make
