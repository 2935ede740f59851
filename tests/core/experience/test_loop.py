"""The student's own work back in class, end to end on real parts: the served student (a real server subprocess
recording into the buffer) gives an invalid tool call; the teacher (a stand-in for a hosted OpenAI-compatible API: a
real HTTP server on loopback) re-answers it; with review required nothing trains until Accept; then the next dataset
build holds the correction as a train example and as a preference pair, the manifest says where it came from, and
the teacher's key is in no file under the data dir."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.datasets import manifest as manifests
from app.core.experience import config, corrections, keys, teacher
from tests.core.datasets.conftest import agent_dir, build  # noqa: F401 - the dataset tests' fixtures
from tests.core.datasets.helpers import ingest, records, write_session
from tests.core.experience.standin import StandInTeacher, chat
from tests.core.experience.test_recording import BASH, FORCED_BAD_CALL, answered, entry, recording, server  # noqa: F401

pytestmark = pytest.mark.slow
KEY = "sk-teacher-e2e-" + "q" * 24
TASK = "List the files."
FIX = chat({"content": None, "tool_calls": [{"id": "c1", "type": "function",
                                             "function": {"name": "Bash", "arguments": json.dumps({"command": "ls"})}}]})


@pytest.fixture(autouse=True)
def ns_home(server, monkeypatch) -> Path:  # noqa: F811 - the recording server's data dir, the key outside it
    monkeypatch.setenv("NIGHTSCHOOL_HOME", str(server.home))
    monkeypatch.setenv("NIGHTSCHOOL_CONFIG", str(server.home.parent / "loop-config"))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    monkeypatch.delenv(keys.ENV_KEY, raising=False)
    return server.home


def corrections_in(folder: str) -> list[dict]:
    return [r for r in records(Path(folder), "train") if r.get("source") == "correction"]


def test_a_flagged_answer_is_corrected_reviewed_and_trained_on_in_the_next_dataset(server, store, agent_dir,  # noqa: F811
                                                                                    build):  # noqa: F811
    for i in range(6):
        write_session(agent_dir, i)
    ingest(store, agent_dir)
    recording(store, True)
    config.set_buffer(store, "require_review", True)
    reply = answered(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": TASK}], "tools": BASH,
                                                      "max_tokens": 64, "grammar": FORCED_BAD_CALL},
                     headers={"X-Nightschool-Client": "claude-code"})
    exp_id = reply.experience
    assert entry(exp_id)["state"] == "flagged"

    standin = StandInTeacher()
    try:
        standin.answer(TASK, FIX)
        config.set_teacher(store, "url", standin.url)
        config.set_teacher(store, "model", "stand-in-teacher-1")
        keys.set_key(KEY)
        run = teacher.correct(store, by="test")
        asked = [r for r in standin.received if r["body"]["messages"][-1]["content"] == TASK]
    finally:
        standin.close()
    assert (run.tried, run.waiting, run.accepted) == (1, 1, 0), run
    [request] = asked  # the teacher re-answered the same prompt with the same tools
    assert request["body"]["tools"] == BASH and request["headers"]["Authorization"] == f"Bearer {KEY}"
    [fix] = corrections.waiting(store)
    assert fix["experience_id"] == exp_id and fix["teacher_model"] == "stand-in-teacher-1"

    before, a = build(name="before-review")
    assert before.ok, before.message
    assert not corrections_in(a.path) and manifests.read(Path(a.path)).corrections == []  # nothing trains before Accept

    corrections.decide(store, fix["id"], accept=True, by="test")
    after, b = build(name="after-review")
    assert after.ok and after.identical_to is None, after.message
    [example] = corrections_in(b.path)
    assert (example["correction_id"], example["experience_id"]) == (fix["id"], exp_id)
    assert example["messages"][-1]["tool_calls"][0]["function"] == {"name": "Bash", "arguments": {"command": "ls"}}
    [used] = manifests.read(Path(b.path)).corrections
    assert (used.experience_id, used.teacher_model, used.source) == (exp_id, "stand-in-teacher-1", "teacher")
    [pair] = list(manifests.iter_pairs(Path(b.path)))
    assert pair["correction_id"] == fix["id"] and '"command": "ls"' in pair["chosen"][0]["content"]
    assert pair["rejected"][0]["content"] == '<tool_call>{"name": "Bash", "arguments": {}}</tool_call>'

    leaks = [f for f in server.home.rglob("*") if f.is_file() and KEY.encode() in f.read_bytes()]
    assert leaks == [] and keys.where().startswith("file:") and not keys.key_file().is_relative_to(server.home)
