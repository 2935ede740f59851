"""The teacher over real HTTP on loopback: corrections stored with provenance, invalid ones rejected, cooldown, batch
limit, token budget and Retry-After respected, and the API key kept out of the data dir and the logs."""
from __future__ import annotations

import email.utils
import json
import logging
import socket
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import keyring
import keyring.backends.fail
import pytest
from keyring.backend import KeyringBackend

from app.core.base.paths import data_dir
from app.core.experience import buffer, config, corrections, keys, teacher
from app.core.experience.buffer import Recorded
from tests.core.experience.standin import StandInTeacher, chat

KEY = "sk-nightschool-TEACHER-" + "k3y" * 10
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
          "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": SCHEMA}}]
T0 = datetime(2031, 3, 4, 12, 0, tzinfo=UTC)
COOLDOWN_MIN = 30.0


def tool_call(arguments: dict) -> dict:
    return {"content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "read_file", "arguments": json.dumps(arguments)}}]}


VALID = chat(tool_call({"path": "setup.py"}))
INVALID = chat(tool_call({"file": 3}))
GARBAGE = (200, {"Content-Type": "text/html"}, b"<html>gateway says hello</html>")
NO_CHOICES = (200, {"Content-Type": "application/json"}, b'{"object": "error"}')
SERVER_ERROR = (500, {"Content-Type": "text/plain"}, b"internal error")


@pytest.fixture
def standin():
    server = StandInTeacher()
    server.default = VALID
    yield server
    server.close()


@pytest.fixture
def configured(store, standin, keyless):
    config.set_teacher(store, "url", standin.url)
    config.set_teacher(store, "model", "stand-in-teacher-1")
    config.set_teacher(store, "cooldown_min", COOLDOWN_MIN)
    config.set_teacher(store, "price_in", 2.0)
    config.set_teacher(store, "price_out", 8.0)
    keys.set_key(KEY)
    return store


def flag(store, prompt: str, minutes: int = 0) -> str:
    """A recorded answer with an invalid tool call (flagged), created `minutes` after a fixed start."""
    request = {"messages": [{"role": "system", "content": "You read files."}, {"role": "user", "content": prompt}],
               "tools": TOOLS, "max_tokens": 64}
    answer = {"role": "assistant", "content": '<tool_call>{"name": "read_file", "arguments": {"file": 3}}</tool_call>'}
    exp_id = f"exp-{prompt}"
    buffer.record(store, Recorded(id=exp_id, request=request, answer=answer, finish_reason="stop",
                                  created_at=datetime(2031, 3, 1, tzinfo=UTC) + timedelta(minutes=minutes)))
    assert buffer.get(store, exp_id)["state"] == "flagged"
    return exp_id


def test_a_valid_correction_is_stored_with_its_provenance_and_accepted(configured, standin):
    store = configured
    exp_id = flag(store, "task-a")
    run = teacher.correct(store, now=T0)
    assert (run.tried, run.accepted, run.failed, run.tokens_used) == (1, 1, 0, 120)
    [fix] = corrections.of(store, exp_id)
    assert fix["state"] == "accepted"
    assert (fix["experience_id"], fix["source"], fix["teacher_model"]) == (exp_id, "teacher", "stand-in-teacher-1")
    assert (fix["prompt_tokens"], fix["completion_tokens"]) == (100, 20)
    assert fix["cost"] == pytest.approx((100 * 2.0 + 20 * 8.0) / 1e6)
    assert fix["created_at"] and fix["answer"]["tool_calls"][0]["function"]["name"] == "read_file"
    assert buffer.get(store, exp_id)["state"] == "corrected"
    [sent] = standin.received
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["Authorization"] == f"Bearer {KEY}"
    assert sent["body"]["messages"][-1]["content"] == "task-a" and sent["body"]["tools"] == TOOLS
    assert (sent["body"]["temperature"], sent["body"]["max_tokens"], sent["body"]["model"]) == (
        0, 1024, "stand-in-teacher-1")
    [item] = corrections.trainable(store)
    assert (item.experience_id, item.teacher_model) == (exp_id, "stand-in-teacher-1")
    assert teacher.correct(store, now=T0).tried == 0  # a corrected entry is not asked again


def test_with_review_required_the_correction_waits(configured):
    store = configured
    config.set_buffer(store, "require_review", True)
    exp_id = flag(store, "task-a")
    run = teacher.correct(store, now=T0)
    assert (run.waiting, run.accepted) == (1, 0)
    assert [w["experience_id"] for w in corrections.waiting(store)] == [exp_id]
    assert corrections.trainable(store) == []


def test_an_invalid_correction_is_rejected_with_the_reason_and_retried_after_the_cooldown(configured, standin):
    store = configured
    exp_id = flag(store, "task-bad")
    standin.answer("task-bad", INVALID, VALID)
    run = teacher.correct(store, now=T0)
    assert (run.tried, run.rejected) == (1, 1)
    [fix] = corrections.of(store, exp_id)
    assert fix["state"] == "rejected" and "1 of 1 tool calls invalid" in fix["reason"]
    entry = buffer.get(store, exp_id)
    assert entry["state"] == "flagged" and "rejected" in entry["last_error"] and entry["attempts"] == 1
    assert teacher.correct(store, now=T0 + timedelta(minutes=COOLDOWN_MIN - 1)).tried == 0
    assert len(standin.received) == 1
    assert teacher.correct(store, now=T0 + timedelta(minutes=COOLDOWN_MIN, seconds=1)).accepted == 1
    assert buffer.get(store, exp_id)["state"] == "corrected"


@pytest.mark.parametrize(("response", "says"), [
    (GARBAGE, "not JSON"), (NO_CHOICES, "not a chat completion"), (SERVER_ERROR, "HTTP 500"),
])
def test_a_failed_call_keeps_the_entry_flagged_until_the_cooldown_passes(configured, standin, response, says):
    store = configured
    exp_id = flag(store, "task-f")
    standin.answer("task-f", response, VALID)
    run = teacher.correct(store, now=T0)
    assert (run.tried, run.failed, run.details[0]["outcome"]) == (1, 1, "failed")
    entry = buffer.get(store, exp_id)
    assert entry["state"] == "flagged" and says in entry["last_error"] and entry["attempts"] == 1
    assert entry["next_try_at"].startswith("2031-03-04T12:30")
    assert corrections.of(store, exp_id) == []
    assert teacher.correct(store, now=T0 + timedelta(minutes=COOLDOWN_MIN - 1)).tried == 0
    assert len(standin.received) == 1  # not asked again before next_try_at
    assert teacher.correct(store, now=T0 + timedelta(minutes=COOLDOWN_MIN)).accepted == 1
    assert len(standin.received) == 2


def test_an_unreachable_teacher_is_said_and_the_entry_waits(configured):
    store = configured
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config.set_teacher(store, "url", f"http://127.0.0.1:{port}/v1")
    exp_id = flag(store, "task-u")
    run = teacher.correct(store, now=T0)
    assert run.failed == 1 and "could not be reached" in run.details[0]["reason"]
    entry = buffer.get(store, exp_id)
    assert entry["state"] == "flagged" and "could not be reached" in entry["last_error"]


def test_the_batch_limit_takes_the_oldest_entries_first(configured, standin):
    store = configured
    config.set_teacher(store, "batch_per_cycle", 2)
    for minutes, prompt in ((2, "task-c"), (0, "task-a"), (1, "task-b")):
        flag(store, prompt, minutes)
    run = teacher.correct(store, now=T0)
    assert run.tried == 2 and standin.prompts() == ["task-a", "task-b"]
    assert teacher.correct(store, now=T0, limit=5).tried == 1  # an explicit limit overrides the batch
    assert standin.prompts() == ["task-a", "task-b", "task-c"]


def test_the_token_budget_stops_the_run_and_says_why(configured, standin):
    store = configured
    config.set_teacher(store, "tokens_per_day", 200)  # each answer uses 120 tokens
    for minutes, prompt in enumerate(("task-a", "task-b", "task-c")):
        flag(store, prompt, minutes)
    run = teacher.correct(store, now=T0)
    assert run.tried == 2 and run.tokens_used == 240 and run.budget_left == 0
    assert "token budget is spent (240 of 200 tokens)" in run.stopped_because
    assert teacher.usage(store, now=T0)["tokens_today"] == 240
    again = teacher.correct(store, now=T0)
    assert again.tried == 0 and "token budget" in again.stopped_because
    assert len(standin.received) == 2
    assert teacher.correct(store, now=T0 + timedelta(days=1)).accepted == 1  # a new day, a new budget


def test_a_429_retry_after_in_seconds_blocks_every_call_until_it_passes(configured, standin):
    store = configured
    first, second = flag(store, "task-a", 0), flag(store, "task-b", 1)
    standin.answer("task-a", (429, {"Retry-After": "120"}, b'{"error": "slow down"}'), VALID)
    run = teacher.correct(store, now=T0)
    assert run.tried == 1 and "429" in run.stopped_because
    assert run.blocked_until == (T0 + timedelta(seconds=120)).isoformat()
    assert buffer.get(store, first)["next_try_at"].startswith("2031-03-04T12:02:00")
    assert teacher.usage(store, now=T0 + timedelta(seconds=60))["blocked_until"].startswith("2031-03-04T12:02:00")
    blocked = teacher.correct(store, now=T0 + timedelta(seconds=60))
    assert blocked.tried == 0 and "until 2031-03-04T12:02:00" in blocked.stopped_because
    assert len(standin.received) == 1  # the second entry was not sent either
    done = teacher.correct(store, now=T0 + timedelta(seconds=121))
    assert done.accepted == 2 and standin.prompts() == ["task-a", "task-a", "task-b"]
    assert {buffer.get(store, e)["state"] for e in (first, second)} == {"corrected"}


def test_a_429_retry_after_as_an_http_date_is_honoured(configured, standin):
    store = configured
    flag(store, "task-a")
    now = datetime.now(UTC)
    standin.answer("task-a", (429, {"Retry-After": email.utils.format_datetime(now + timedelta(hours=1),
                                                                                 usegmt=True)}, b""))
    teacher.correct(store, now=now)
    usage = teacher.usage(store, now=now + timedelta(minutes=59))
    assert usage["blocked_until"] is not None
    assert teacher.correct(store, now=now + timedelta(minutes=59)).tried == 0
    assert len(standin.received) == 1
    assert teacher.usage(store, now=now + timedelta(minutes=61))["blocked_until"] is None


def test_an_unconfigured_teacher_says_what_is_missing(store, keyless):
    flag(store, "task-a")
    run = teacher.correct(store, now=T0)
    assert run.tried == 0
    assert "not configured: no URL, no model, no API key" in run.stopped_because
    config.set_teacher(store, "url", "https://teacher.example/v1")
    config.set_teacher(store, "model", "big")
    assert "not configured: no API key" in teacher.correct(store, now=T0).stopped_because
    assert teacher.usage(store)["configured"] is False


def test_a_local_teacher_on_loopback_needs_no_key(store, standin, keyless):
    config.set_teacher(store, "url", standin.url)
    config.set_teacher(store, "model", "local")
    flag(store, "task-a")
    assert teacher.correct(store, now=T0).accepted == 1
    assert "Authorization" not in standin.received[0]["headers"]


def test_the_key_is_in_no_file_under_the_data_dir_nor_in_any_log(configured, standin, keyless, caplog):
    store = configured
    caplog.set_level(logging.DEBUG)
    standin.answer("task-a", VALID)
    standin.answer("task-b", INVALID)
    standin.answer("task-c", (500, {}, b"echo: Bearer " + KEY.encode()))  # a server that echoes the key back
    standin.answer("task-d", (429, {"Retry-After": "5"}, b""))
    for minutes, prompt in enumerate(("task-a", "task-b", "task-c", "task-d")):
        flag(store, prompt, minutes)
    teacher.correct(store, now=T0)
    usage = teacher.usage(store, now=T0)
    assert len(standin.received) == 4 and all(r["headers"]["Authorization"] == f"Bearer {KEY}"
                                              for r in standin.received)
    home = data_dir().resolve()
    files = [p for p in home.rglob("*") if p.is_file()]
    assert any(p.name == "nightschool.db" for p in files)
    for path in files:
        assert KEY.encode() not in path.read_bytes(), path
    assert KEY not in caplog.text and KEY not in json.dumps(usage)
    assert "<teacher key>" in buffer.get(store, "exp-task-c")["last_error"]
    where = keys.where()
    assert where.startswith("file:")
    key_file = Path(where.removeprefix("file:")).resolve()
    assert not key_file.is_relative_to(home) and key_file.parent == keyless.resolve()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert keys.get_key() == KEY


def test_the_key_file_is_refused_inside_the_data_dir(monkeypatch, keyless):
    monkeypatch.setenv("NIGHTSCHOOL_CONFIG", str(data_dir() / "config"))
    with pytest.raises(keys.TeacherKeyError, match="inside the data dir"):
        keys.set_key(KEY)
    assert not (data_dir() / "config" / keys.FILE_NAME).exists()


def test_the_key_from_the_environment_is_read_but_never_stored(monkeypatch, keyless):
    monkeypatch.setenv(keys.ENV_KEY, "env-key-123")
    assert (keys.get_key(), keys.where()) == ("env-key-123", f"env:{keys.ENV_KEY}")
    assert not (keyless / keys.FILE_NAME).exists()


class MemoryKeyring(KeyringBackend):
    """A stand-in for the OS keyring (none exists on a headless CI machine): passwords in a dict."""

    priority = 1

    def __init__(self) -> None:
        super().__init__()
        self.passwords: dict[tuple[str, str], str] = {}

    def get_password(self, service, username):
        return self.passwords.get((service, username))

    def set_password(self, service, username, password):
        self.passwords[(service, username)] = password

    def delete_password(self, service, username):
        self.passwords.pop((service, username), None)


def test_a_usable_keyring_holds_the_key_and_no_file_is_written(keyless):
    ring = MemoryKeyring()
    keyring.set_keyring(ring)
    assert keys.set_key(KEY) == "keyring"
    assert ring.passwords == {("nightschool", "teacher"): KEY}
    assert (keys.get_key(), keys.where()) == (KEY, "keyring")
    assert not (keyless / keys.FILE_NAME).exists()
    keys.clear_key()
    assert (keys.get_key(), keys.where()) == (None, "none")


def test_a_refused_key_stops_the_run_and_says_so(configured, standin):
    store = configured
    flag(store, "task-a", 0)
    flag(store, "task-b", 1)
    standin.answer("task-a", (401, {}, b'{"error": "bad key"}'))
    run = teacher.correct(store, now=T0)
    assert run.tried == 1 and "refused the API key (HTTP 401)" in run.stopped_because
    assert standin.prompts() == ["task-a"]
    assert "HTTP 401" in buffer.get(store, "exp-task-a")["last_error"]
