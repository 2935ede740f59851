"""`nightschool experience …` on a real store: list with counts (and --json), show by id prefix, accept / reject change
the correction's state, a bad id exits 2 with what / why / fix, on / off say what is recorded, `correct-now` against a
stand-in teacher on loopback, and `teacher key --stdin` keeps the key out of the data dir and out of the output."""
from __future__ import annotations

import io
import json
import stat

import pytest

from app.cli.main import main
from app.core.experience import buffer, config, corrections
from tests.core.experience.standin import StandInTeacher, chat

SECRET = "sk-test-4f9c2a7e1b3d5f60"
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
GOOD_CALL = {"role": "assistant", "tool_calls": [{"type": "function", "function": {
    "name": "read_file", "arguments": json.dumps({"path": "README.md"})}}]}


pytestmark = pytest.mark.usefixtures("keyless")  # no OS keyring; the key file in the test's config dir


def request(question: str) -> dict:
    return {"messages": [{"role": "user", "content": question}], "tools": TOOLS, "max_tokens": 64}


def seed(store) -> dict[str, str]:
    """One entry per visible reason, and one fine answer."""
    answers = {
        "exp-invalid-1": ({"role": "assistant", "content": '<tool_call>{"name": "read_file", "arguments": '
                                                           '{"file": "x"}}</tool_call>'}, "stop"),
        "exp-rambled-1": ({"role": "assistant", "content": "and so on " * 30}, "length"),
        "exp-empty-1": ({"role": "assistant", "content": ""}, "stop"),
        "exp-fine-1": ({"role": "assistant", "content": "Hello."}, "stop"),
    }
    for exp_id, (answer, finish) in answers.items():
        buffer.record(store, buffer.Recorded(id=exp_id, request=request("open the readme"), answer=answer,
                                             client="claude-code", finish_reason=finish))
    return {k: k for k in answers}


def out_json(capsys) -> dict | list:
    return json.loads(capsys.readouterr().out)


def test_list_counts_by_state_and_reason_and_its_json_parses(store, capsys):
    assert main(["experience", "list"]) == 0
    empty = capsys.readouterr().out
    assert "Buffer: off" in empty and "no answers recorded yet — turn the buffer on" in empty

    seed(store)
    assert main(["experience", "list", "--json"]) == 0
    data = out_json(capsys)
    assert data["counts"]["total"] == 4 and data["counts"]["by_state"] == {"flagged": 3, "recorded": 1}
    assert data["counts"]["by_reason"]["invalid_tool_call"] == 1 and data["counts"]["by_reason"]["rambled"] == 1
    assert {e["id"] for e in data["entries"]} == {"exp-invalid-1", "exp-rambled-1", "exp-empty-1", "exp-fine-1"}
    assert data["buffer"]["enabled"] is False and data["waiting"] == []

    assert main(["experience", "list", "--reason", "rambled", "--json"]) == 0
    assert [e["id"] for e in out_json(capsys)["entries"]] == ["exp-rambled-1"]
    assert main(["experience", "list", "--state", "recorded"]) == 0
    text = capsys.readouterr().out
    assert "Entries: 4 (recorded 1, flagged 3)" in text
    assert "Flagged by reason: invalid_tool_call 1, rambled 1, empty 1" in text
    assert "exp-fine-1" in text and "exp-empty-1" not in text


def test_show_takes_a_unique_prefix_and_a_bad_id_exits_2_with_what_why_and_fix(store, capsys):
    seed(store)
    assert main(["experience", "show", "exp-inv"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Experience exp-invalid-1: flagged")
    assert "needs improvement (invalid_tool_call): 1 of 1 tool calls invalid" in text
    assert "user      open the readme" in text and "Corrections: none yet" in text

    assert main(["experience", "show", "exp-invalid-1", "--json"]) == 0
    shown = out_json(capsys)
    assert shown["request"]["tools"] == TOOLS and shown["corrections"] == []

    assert main(["experience", "show", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "there is no experience 'nope'" in captured.err  # what
    assert "never recorded, or retention deleted it" in captured.err  # why
    assert "nightschool experience list" in captured.err  # what to do

    assert main(["experience", "show", "exp-"]) == 2  # several ids start so
    assert "start of several experience ids" in capsys.readouterr().err


def test_accept_and_reject_decide_waiting_corrections(store, capsys):
    seed(store)
    config.set_buffer(store, "require_review", True)
    first = buffer.feedback(store, "exp-invalid-1", "down", correction=GOOD_CALL)["corrections"][0]
    second = buffer.feedback(store, "exp-empty-1", "down", correction=GOOD_CALL)["corrections"][0]
    assert first["state"] == second["state"] == "waiting"

    assert main(["experience", "list"]) == 0
    assert f"#{first['id']:<5} for exp-invalid-1" in capsys.readouterr().out

    assert main(["experience", "accept", str(first["id"])]) == 0
    assert "accepted: it trains in the next cycle" in capsys.readouterr().out
    assert corrections.get(store, first["id"])["state"] == "accepted"
    assert corrections.get(store, first["id"])["decided_by"] == "cli"

    assert main(["experience", "reject", str(second["id"]), "--reason", "wrong file", "--json"]) == 0
    decided = out_json(capsys)
    assert decided["state"] == "rejected" and decided["reason"] == "wrong file"
    assert buffer.get(store, "exp-empty-1")["state"] == "flagged"  # back in line for another correction

    assert main(["experience", "accept", str(first["id"])]) == 2  # decided already
    assert "is accepted, not waiting for review" in capsys.readouterr().err
    assert main(["experience", "reject", "9999"]) == 2
    assert "there is no correction 9999" in capsys.readouterr().err


def test_on_and_off_say_what_is_recorded_and_settings_refuse_bad_values(store, capsys):
    assert main(["experience", "on"]) == 0
    said = capsys.readouterr().out
    assert "records each request and the student's answer" in said
    assert "scrubbed like captured sessions" in said and "the API key is never stored" in said
    assert "At most 20,000 entries are kept, none older than 30 days" in said
    assert config.buffer(store).enabled is True
    assert main(["experience", "off", "--json"]) == 0
    assert out_json(capsys)["enabled"] is False and config.buffer(store).enabled is False

    assert main(["experience", "settings", "max_rows", "0"]) == 2
    assert "max_rows accepts a whole number (>= 1)" in capsys.readouterr().err
    assert main(["experience", "settings", "max_rows", "500", "--json"]) == 0
    assert out_json(capsys)["max_rows"] == 500 and config.buffer(store).max_rows == 500
    assert main(["experience", "teacher", "nope", "1"]) == 2
    assert "there is no teacher setting 'nope'" in capsys.readouterr().err


def test_teacher_key_comes_from_stdin_and_stays_out_of_the_data_dir_and_the_output(store, capsys, monkeypatch,
                                                                                   ns_home, keyless):
    assert main(["experience", "teacher", "key", SECRET]) == 2  # never from the command line
    assert "not taken from the command line" in capsys.readouterr().err
    assert not (keyless / "teacher.key").exists()

    monkeypatch.setattr("sys.stdin", io.StringIO(SECRET + "\n"))
    assert main(["experience", "teacher", "key", "--stdin"]) == 0
    captured = capsys.readouterr()
    key_file = keyless / "teacher.key"
    assert f"kept in file:{key_file}" in captured.out
    assert key_file.read_text().strip() == SECRET and stat.S_IMODE(key_file.stat().st_mode) == 0o600

    assert main(["experience", "teacher"]) == 0
    assert main(["experience", "teacher", "--json"]) == 0
    assert main(["experience", "teacher", "usage", "--json"]) == 0
    captured = capsys.readouterr().out + capsys.readouterr().err
    assert f"file:{key_file}" in captured
    assert SECRET not in captured
    for path in ns_home.rglob("*"):
        assert not path.is_file() or SECRET.encode() not in path.read_bytes(), path

    assert main(["experience", "teacher", "key", "--clear"]) == 0
    assert not key_file.exists()


def test_correct_now_runs_the_teacher_within_the_limit_and_says_why_it_stopped(store, capsys):
    seed(store)
    assert main(["experience", "correct-now"]) == 0  # nothing configured: it says so and changes nothing
    assert "stopped: the teacher is not configured: no URL, no model" in capsys.readouterr().out

    teacher = StandInTeacher()
    teacher.default = chat(GOOD_CALL, prompt_tokens=30, completion_tokens=12)
    try:
        config.set_teacher(store, "url", teacher.url)
        config.set_teacher(store, "model", "stand-in-teacher")
        assert main(["experience", "correct-now", "--limit", "2", "--json"]) == 0
        run = out_json(capsys)
        assert run["tried"] == 2 and run["accepted"] == 2 and run["tokens_used"] == 84
        assert len(teacher.received) == 2 and teacher.received[0]["body"]["tools"] == TOOLS

        assert main(["experience", "correct-now"]) == 0
        text = capsys.readouterr().out
        assert text.startswith("tried 1: 1 accepted, 0 waiting for review, 0 rejected, 0 failed; 42 tokens used")
        assert "every due answer was tried" in text
        assert main(["experience", "teacher", "usage"]) == 0
        assert "Budget: 126 of 200,000 tokens today (199,874 left)" in capsys.readouterr().out
    finally:
        teacher.close()
