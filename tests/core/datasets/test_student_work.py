"""The student's own work is never a teacher example (issue 42, must show): real Codex rollouts imported (one as it
is, one whose model is the student's served name, one that switches to it from its second request), then the next
SFT build through the real worker: the student's session is absent and counted under its own filter, the mixed one
gives only its teacher turns."""
from __future__ import annotations

from pathlib import Path

from app.core.capture.ingest import Ingestor
from app.core.capture.sources import CaptureConfig
from app.core.datasets import manifest
from app.core.datasets.filters import STUDENT_WORK
from app.core.scrub.scrubber import Scrubber
from app.core.ship.serving import SERVED_MODEL
from tests.core.capture.rollouts import MIXED, MIXED_NAME, STUDENT, TEACHER, rollout
from tests.core.datasets.helpers import records


def test_the_students_rollout_is_absent_from_the_next_builds_teacher_examples(store, build, tmp_path):
    folder = tmp_path / "codex" / "sessions"
    ingestor = Ingestor(store, CaptureConfig(roots={"codex": [str(folder)]}), Scrubber(home="/home/me"))
    stored = {}
    for key, path in (("teacher", rollout(TEACHER, folder)), ("student", rollout(STUDENT, folder, SERVED_MODEL)),
                      ("mixed", rollout(MIXED, folder, SERVED_MODEL, from_request=2, name=MIXED_NAME))):
        result = ingestor.ingest(path, agent="codex", final=True)
        assert result.status == "ok", result.message
        stored[key] = result.sessions[0]

    outcome, ds = build(name="after-connect", mode="full", test_share=0.0, val_share=0.0)
    assert outcome.ok, outcome.message
    examples = records(Path(ds.path), "train")
    by_session = {e["session_id"] for e in examples}
    assert stored["teacher"] in by_session and stored["mixed"] in by_session
    assert stored["student"] not in by_session  # the student's own work: not one teacher example

    man = manifest.read(Path(ds.path))
    assert man.filters[STUDENT_WORK] == 1
    assert man.counts["turns of the student's own work left out"] == 2
    mixed = [e for e in examples if e["session_id"] == stored["mixed"]]
    requests = {m["content"] for e in mixed for m in e["messages"] if m["role"] == "user"}
    assert len(requests) == 1 and next(iter(requests)).startswith("Build a simple Pomodoro timer")
    assert not any("add a Pause/Resume feature" in m.get("content", "") or "smooth transitions" in m.get("content", "")
                   for e in examples for m in e["messages"])  # the requests the student answered: nowhere
