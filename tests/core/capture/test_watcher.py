"""The capture service: an appended line is in the store within 1 s; a restart catches up with no duplicates."""
from __future__ import annotations

import json
import sqlite3
import threading
import time

from app.core.capture.ingest import Ingestor
from app.core.capture.watcher import CaptureService
from tests.core.capture.helpers import SID, assistant, text, user


def append(path, *records) -> None:
    with path.open("a") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in records))


def stored(store) -> int:
    return sqlite3.connect(store.path).execute("select count(*) from messages").fetchone()[0]


class Arrivals:
    """Signals each ingest that stored something (the service calls on_ingest from its worker thread)."""

    def __init__(self) -> None:
        self.event, self.results = threading.Event(), []

    def __call__(self, result) -> None:
        self.results.append(result)
        self.event.set()

    def wait(self, timeout: float) -> bool:
        ok = self.event.wait(timeout)
        self.event.clear()
        return ok


def test_an_appended_line_is_stored_within_a_second(store, config, roots):
    path = roots["claude-code"] / "-home-me-proj" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    append(path, user("u1", None, "hello"))
    arrivals = Arrivals()
    service = CaptureService(Ingestor(store, config), on_ingest=arrivals)
    service.start()
    try:
        assert service.swept.wait(10) and stored(store) == 1  # the first sweep took what was there
        assert [s.state for s in service.status() if s.agent == "claude-code"] == ["watching"]
        arrivals.event.clear()
        started = time.monotonic()
        append(path, assistant("a1", "u1", [text("hi there")]))
        assert arrivals.wait(5.0), "the append was never ingested"
        latency = time.monotonic() - started
        assert stored(store) == 2 and latency < 1.0, f"visible after {latency:.2f} s"

        new = roots["claude-code"] / "-home-me-other" / "22222222-2222-3333-4444-555555555555.jsonl"
        new.parent.mkdir()
        append(new, user("v1", None, "a new session in a new project folder"))
        assert arrivals.wait(5.0) and stored(store) == 3
    finally:
        service.stop()


def test_a_restart_takes_what_was_written_while_stopped_exactly_once(store, config, roots):
    path = roots["claude-code"] / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    append(path, user("u1", None, "one"))
    first = CaptureService(Ingestor(store, config))
    first.start()
    assert first.swept.wait(10)
    first.stop()
    append(path, assistant("a1", "u1", [text("two")]), user("u2", "a1", "three"))
    second = CaptureService(Ingestor(store, config))
    second.start()
    try:
        assert second.swept.wait(10)
    finally:
        second.stop()
    con = sqlite3.connect(store.path)
    assert stored(store) == 3
    assert con.execute("select sum(lines_in), sum(stored) from imports").fetchone() == (3, 3)


def test_a_root_that_appears_later_is_watched(store, config, roots, tmp_path):
    late = tmp_path / "late-codex"
    config.roots["codex"] = [str(late)]
    service = CaptureService(Ingestor(store, config), sweep_s=0.2)
    service.start()
    try:
        assert [s.state for s in service.status() if s.agent == "codex"] == ["not found"]
        late.mkdir()
        service.swept.clear()
        assert service.swept.wait(10)
        assert [s.state for s in service.status() if s.agent == "codex"] == ["watching"]
    finally:
        service.stop()
