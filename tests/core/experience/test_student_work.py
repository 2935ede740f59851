"""The student's captured work offered to the experience buffer (datasets/student_work): nothing while the buffer is
off; with it on, each action the student took in a real Codex rollout (the mixed one: from its second request) is an
entry — its turn as context, the OpenAI wire form the teacher is asked in — the teacher's actions none, a failed
tool call flagged, each offered once."""
from __future__ import annotations

import json
from datetime import UTC, datetime

from app.core.capture.ingest import Ingestor
from app.core.capture.sources import CaptureConfig
from app.core.datasets.student_work import ROUTE, offer
from app.core.experience import buffer, config, flags
from app.core.scrub.scrubber import Scrubber
from app.core.ship.serving import SERVED_MODEL
from tests.core.capture.rollouts import MIXED, MIXED_NAME, TEACHER, rollout

AFTER = datetime(2025, 10, 22, tzinfo=UTC)  # the day after the mixed rollout (the buffer keeps 30 days)


def _ingest(store, tmp_path) -> Ingestor:
    folder = tmp_path / "codex"
    ingestor = Ingestor(store, CaptureConfig(roots={"codex": [str(folder)]}), Scrubber(home="/home/me"))
    for path in (rollout(TEACHER, folder), rollout(MIXED, folder, SERVED_MODEL, from_request=2, name=MIXED_NAME)):
        assert ingestor.ingest(path, agent="codex", final=True).status == "ok"
    return ingestor


def test_the_students_actions_are_offered_once_while_the_buffer_is_on(store, tmp_path):
    ingestor = _ingest(store, tmp_path)
    assert offer(store, now=AFTER) == {"offered": 0, "flagged": 0, "why": "the experience buffer is off"}
    assert buffer.counts(store)["total"] == 0

    config.set_buffer(store, "enabled", True)
    assert offer(store, now=AFTER) == {"offered": 12, "flagged": 1}  # turn 2: 3 actions, turn 3: 9; one failed
    entries = [buffer.get(store, e["id"]) for e in buffer.entries(store, limit=100)]
    assert len(entries) == 12 and {(e["route"], e["model"], e["client"]) for e in entries} == \
        {(ROUTE, SERVED_MODEL, "codex session")}
    first = min(entries, key=lambda e: e["created_at"])
    asked = first["request"]["messages"]
    assert [m["role"] for m in asked[:3]] == ["system", "user", "user"]
    assert asked[1]["content"].startswith("Build a simple Pomodoro timer")  # the task's first request, then the turn
    assert asked[2]["content"].startswith("add smooth transitions")
    calls = [c for e in entries for c in e["answer"].get("tool_calls") or []]
    assert len(calls) == 10 and all(isinstance(json.loads(c["function"]["arguments"]), dict) for c in calls)
    failed = [e for e in entries if e["state"] == "flagged"]
    assert len(failed) == 1 and failed[0]["reasons"][0]["kind"] == flags.TOOL_FAILED
    assert "apply_patch call failed: apply_patch verification failed" in failed[0]["reasons"][0]["text"]

    assert offer(store, now=AFTER) == {"offered": 0, "flagged": 0}  # nothing stored since
    again = ingestor.ingest(rollout(MIXED, tmp_path / "codex", SERVED_MODEL, from_request=2, name=MIXED_NAME),
                            agent="codex", final=True)  # written again: the session is stored again
    assert again is not None and again.status == "ok"
    assert offer(store, now=AFTER)["offered"] == 0 and buffer.counts(store)["total"] == 12  # stored again: once
