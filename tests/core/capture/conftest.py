"""Capture fixtures: a store in the test's data dir, an ingestor with a fixed home, a Claude projects root."""
from __future__ import annotations

import pytest

from app.core.capture.ingest import Ingestor
from app.core.scrub.scrubber import Scrubber
from app.core.capture.sources import CaptureConfig


@pytest.fixture
def roots(tmp_path):
    """Agent roots inside the test dir (never the real home)."""
    base = tmp_path / "agents"
    out = {"claude-code": base / ".claude" / "projects", "codex": base / ".codex" / "sessions",
           "gemini": base / ".gemini" / "tmp"}
    for path in out.values():
        path.mkdir(parents=True)
    return out


@pytest.fixture
def config(roots):
    return CaptureConfig(roots={agent: [str(path)] for agent, path in roots.items()})


@pytest.fixture
def ingestor(store, config):
    return Ingestor(store, config, Scrubber(home="/home/me"))
