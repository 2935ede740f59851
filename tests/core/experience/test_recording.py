"""The built-in server records its answers into the experience buffer: a REAL server subprocess (the tiny model as a
GGUF, started the way the app starts it) on loopback, real HTTP. Rows carry the client's label, the model, latency
and tokens; planted secrets and the API key are in no file of the data dir; an invalid tool call is flagged with its
reason; nothing is recorded while the buffer is off; clients rate answers through /nightschool/feedback, and a
malformed rating is refused with what was wrong."""
from __future__ import annotations

import json
import random
import string
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.core.base import paths
from app.core.base.fingerprint import sha256_file
from app.core.experience import buffer, config, flags
from app.core.ship import serving
from engine.workers import llama_tools
from engine.serve.recorder import Exchange, Recorder
from tests.conftest import kill_engines_under

pytestmark = pytest.mark.slow
CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]
BASH = [{"type": "function", "function": {"name": "Bash", "description": "Run a shell command", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
# A GBNF grammar makes the real model say exactly this: a call to Bash without its required `command`
FORCED_BAD_CALL = 'root ::= "<tool_call>{\\"name\\": \\"Bash\\", \\"arguments\\": {}}</tool_call>"'


@dataclass
class Served:
    home: Path
    base: str
    key: str
    sha256: str


@dataclass
class Reply:
    status: int
    experience: str | None
    body: bytes
    seconds: float

    def json(self) -> dict:
        return json.loads(self.body)


@pytest.fixture(scope="module")
def server(shippable_model, tmp_path_factory):
    """One server for the module, started by the app's own code (so with `--db`), in a data dir of its own."""
    root = tmp_path_factory.mktemp("recording")
    home = root / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NIGHTSCHOOL_HOME", str(home))
        gguf = llama_tools.convert(shippable_model, root / "tiny.f16.gguf", root / "convert.log")
        sha = sha256_file(gguf)
        state = serving.start(serving.Model("tiny", str(gguf), sha), port=0)
        try:
            yield Served(home, f"http://{state['host']}:{state['port']}", serving.api_key(), sha)
        finally:
            serving.stop()
            kill_engines_under(home)


@pytest.fixture(autouse=True)
def ns_home(server, monkeypatch) -> Path:
    """Every test works in the server's data dir (overrides the private one per test)."""
    monkeypatch.setenv("NIGHTSCHOOL_HOME", str(server.home))
    monkeypatch.setenv("NIGHTSCHOOL_CONFIG", str(server.home.parent / "config"))  # the teacher key: never the home
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    return server.home


def post(server: Served, route: str, body: dict, headers: dict | None = None, key: str | None = "") -> Reply:
    req = urllib.request.Request(server.base + route, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    if key is not None:
        req.add_header("Authorization", f"Bearer {key or server.key}")
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return Reply(resp.status, resp.headers.get("X-Nightschool-Experience"), resp.read(),
                         time.perf_counter() - started)
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.headers.get("X-Nightschool-Experience"), exc.read(), time.perf_counter() - started)


def answered(server: Served, route: str, body: dict, headers: dict | None = None) -> Reply:
    """A request the buffer records: answered, and the answer names its experience id."""
    reply = post(server, route, body, headers)
    assert reply.status == 200, reply.body
    assert reply.experience and len(reply.experience) == 32 and int(reply.experience, 16) >= 0, reply.experience
    return reply


def recording(store, on: bool) -> dict:
    """Turn the buffer on/off as the GUI and CLI do; the server's status call puts the setting in effect at once."""
    config.set_buffer(store, "enabled", on)
    code, status = serving.request("GET", "/nightschool/status")
    assert code == 200 and status["recording"]["enabled"] is on, status
    return status["recording"]


def entry(exp_id: str) -> dict:
    """The recorded entry over HTTP (the server answers once its write is done)."""
    code, body = serving.request("GET", f"/nightschool/experience/{exp_id}")
    assert code == 200, body
    return body


def planted() -> dict[str, str]:
    rand = random.Random()
    return {"aws": "AKIA" + "".join(rand.choices(string.ascii_uppercase + "234567", k=16)),
            "password": "pw-" + "".join(rand.choices(string.ascii_letters + string.digits, k=14))}


def test_answers_are_recorded_with_client_model_latency_and_tokens(server, store):
    recording(store, True)
    labelled = answered(server, "/v1/chat/completions", {"messages": CAPITAL, "max_tokens": 24},
                        {"X-Nightschool-Client": "pytest-agent", "User-Agent": "OtherAgent/2.0"})
    by_user = answered(server, "/v1/chat/completions", {"messages": CAPITAL, "max_tokens": 8, "user": "alice"})
    by_agent = answered(server, "/v1/completions", {"prompt": "The capital of France is", "max_tokens": 8},
                        {"User-Agent": "MyAgent/1.2 (linux; x86_64)"})
    anonymous = answered(server, "/v1/chat/completions", {"messages": CAPITAL, "max_tokens": 8}, {"User-Agent": ""})
    streamed = answered(server, "/v1/chat/completions", {"messages": CAPITAL, "max_tokens": 12, "stream": True})

    for reply, client, route in ((labelled, "pytest-agent", "chat"), (by_user, "alice", "chat"),
                                 (by_agent, "MyAgent", "completion"), (anonymous, "unknown", "chat"),
                                 (streamed, "Python-urllib", "chat")):
        got = entry(reply.experience)
        assert (got["client"], got["route"], got["model"], got["model_sha256"]) == (client, route, "tiny",
                                                                                    server.sha256)
        # inside the client's round trip, give or take 1 ms: the server's figure is rounded to 0.01 ms and timed in
        # another process (CI once saw 54.2 ms recorded against a 54.17 ms round trip)
        assert 0 < got["latency_ms"] <= reply.seconds * 1000 + 1.0, (got["latency_ms"], reply.seconds)
        assert got["completion_tokens"] > 0 and got["answer"]["role"] == "assistant"
        # the flags are those of the stored request and answer (a cut-off answer: "rambled")
        assert got["reasons"] == flags.needs_improvement(got["request"], got["answer"], got["finish_reason"],
                                                         got["request"].get("max_tokens"))
        assert got["state"] == ("flagged" if got["reasons"] else "recorded")
        if reply is not streamed:
            usage, choice = reply.json()["usage"], reply.json()["choices"][0]
            assert (got["prompt_tokens"], got["completion_tokens"]) == (usage["prompt_tokens"],
                                                                        usage["completion_tokens"])
            assert got["finish_reason"] == choice["finish_reason"]
            assert got["answer"]["content"] == (choice["text"] if route == "completion"
                                                else choice["message"]["content"])

    # the stream's deltas are assembled into the one message the client saw, one token per chunk
    chunks = [json.loads(line[5:]) for line in streamed.body.decode().splitlines()
              if line.startswith("data:") and line[5:].strip() != "[DONE]"]
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"][0]["delta"].get("content")]
    got = entry(streamed.experience)
    assert got["answer"]["content"] == "".join(deltas) and got["completion_tokens"] == len(deltas)
    assert got["finish_reason"] == chunks[-1]["choices"][0]["finish_reason"] and got["request"]["stream"] is True


def test_secrets_and_the_api_key_reach_no_file_of_the_data_dir(server, store):
    recording(store, True)
    secret = planted()
    told = (f"Deploy with AWS key {secret['aws']} and export DB_PASSWORD={secret['password']}; "
            f"the server key is {server.key}")
    plain = answered(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": told}],
                                                      "max_tokens": 8})
    streamed = answered(server, "/v1/chat/completions", {"messages": [{"role": "system", "content": told}, *CAPITAL],
                                                         "max_tokens": 8, "stream": True},
                        {"X-Nightschool-Client": "leaky-agent"})
    for reply in (plain, streamed):
        stored = json.dumps(entry(reply.experience)["request"])
        assert "<SECRET:aws_access_key>" in stored and "<SECRET:env_value>" in stored
        assert "<SECRET:server_api_key>" in stored

    files = [p for p in server.home.rglob("*") if p.is_file()]  # read as they are: the db, its -wal, logs, serve/
    assert any(p.name == "nightschool.db" for p in files) and any(p.name == "server.log" for p in files)
    for path in files:
        data = path.read_bytes()
        for name, value in secret.items():
            assert value.encode() not in data, f"the planted {name} is in {path}"
        if path != server.home / "serve" / "api_key":  # where the key lives, readable by this user only
            assert server.key.encode() not in data, f"the API key is in {path}"


def test_an_invalid_tool_call_is_flagged_with_its_reason(server, store):
    recording(store, True)
    reply = answered(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "List the files."}],
                                                      "tools": BASH, "max_tokens": 64, "grammar": FORCED_BAD_CALL})
    said = reply.json()["choices"][0]["message"]["content"]
    assert said == '<tool_call>{"name": "Bash", "arguments": {}}</tool_call>'
    got = entry(reply.experience)
    assert got["state"] == "flagged"
    assert got["reasons"] == [{"kind": "invalid_tool_call",
                               "text": "1 of 1 tool calls invalid: 'command' is a required property"}]


def test_the_writer_assembles_a_streamed_tool_call_and_flags_it(server, store):
    """The writer's own path (what the middleware queues): a streamed answer whose call arrives in pieces."""
    recording(store, True)
    tools = [{"type": "function", "function": {"name": "Read", "parameters": {
        "type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"],
        "additionalProperties": False}}}]
    pieces = [{"role": "assistant"}, {"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                                      "function": {"name": "Read", "arguments": ""}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": '{"path": '}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": "3}"}}]}]
    sse = "".join(f"data: {json.dumps({'choices': [{'index': 0, 'delta': d, 'finish_reason': None}]})}\r\n\r\n"
                  for d in pieces)
    sse += f"data: {json.dumps({'choices': [{'index': 0, 'delta': {}, 'finish_reason': 'tool_calls'}]})}\r\n\r\n"
    sse += "data: [DONE]\r\n\r\n"
    request = {"messages": [{"role": "user", "content": "Show me app.py"}], "tools": tools, "stream": True}
    writer = Recorder(paths.db_path(), api_key=server.key)
    writer.open()
    exchange = Exchange(id="f" * 32, route="chat", request=json.dumps(request).encode(), response=sse.encode(),
                        started=time.time(), latency_ms=12.5, user_agent="StreamAgent/0.1", model="tiny")
    assert writer.write(exchange) == "recorded"

    got = buffer.get(store, "f" * 32)
    assert got["answer"]["tool_calls"] == [{"id": "c1", "type": "function",
                                            "function": {"name": "Read", "arguments": '{"path": 3}'}}]
    assert got["client"] == "StreamAgent" and got["finish_reason"] == "tool_calls" and got["completion_tokens"] == 3
    (reason,) = got["reasons"]
    assert reason["kind"] == "invalid_tool_call" and reason["text"].startswith("1 of 1 tool calls invalid: ")
    assert "'file_path' is a required property" in reason["text"] and "'path' was unexpected" in reason["text"]


def test_nothing_is_recorded_while_the_buffer_is_off(server, store):
    before = recording(store, False)
    total = buffer.counts(store)["total"]
    reply = post(server, "/v1/chat/completions", {"messages": CAPITAL, "max_tokens": 8})
    assert reply.status == 200 and reply.experience is None  # no id: nothing will be recorded
    after = serving.request("GET", "/nightschool/status")[1]["recording"]
    assert (after["recorded"], after["queued"], after["pending"]) == (before["recorded"], 0, 0)
    assert buffer.counts(store)["total"] == total
    # the writer discards what was queued before the setting went off
    writer = Recorder(paths.db_path())
    writer.open()
    late = Exchange(id="e" * 32, route="chat", request=b'{"messages": []}', response=b"{}", started=time.time(),
                    latency_ms=1.0)
    assert writer.write(late) == "discarded" and buffer.counts(store)["total"] == total


def test_a_full_queue_drops_the_answer_and_counts_it():
    rec = Recorder(None, queue_size=1)
    for n in range(3):
        rec.begin(str(n))
        rec.submit(Exchange(id=str(n), route="chat", request=b"{}", response=b"{}", started=0.0, latency_ms=0.0))
    assert rec.counts.dropped == 2 and rec.queue.qsize() == 1 and rec.pending == {"0"}
    assert rec.wait_written("1", timeout=0)  # a dropped answer is not waited for


def test_feedback_up_down_and_malformed_calls(server, store):
    recording(store, True)
    first = answered(server, "/v1/chat/completions", {"messages": CAPITAL, "max_tokens": 8})
    # rated straight after the answer: the server finishes writing the entry first
    code, body = serving.request("POST", "/nightschool/feedback", {"experience": first.experience, "rating": "up"})
    assert code == 200 and body["feedback"] == "up" and not any(r["kind"] == "client" for r in body["reasons"])

    second = answered(server, "/v1/chat/completions", {"messages": CAPITAL, "max_tokens": 8})
    code, body = serving.request("POST", "/nightschool/feedback", {"experience": second.experience, "rating": "down",
                                                             "note": "it should name Paris"})
    assert code == 200 and body["feedback"] == "down" and body["state"] == "flagged"
    assert {"kind": "client", "text": "the client marked the answer bad: it should name Paris"} in body["reasons"]

    third = answered(server, "/v1/chat/completions", {"messages": CAPITAL, "max_tokens": 8})
    code, body = serving.request("POST", "/nightschool/feedback", {"experience": third.experience, "rating": "down",
                                                             "correction": "The capital of France is Paris."})
    assert code == 200 and body["feedback"] == "down", body
    (offered,) = body["corrections"]  # validated and stored like a teacher's (accepted or rejected with the reason)
    assert offered["source"] == "client" and offered["state"] in ("accepted", "waiting", "rejected"), offered

    unchanged = entry(first.experience)
    refused = {
        "rating": ({"experience": first.experience}, "rating"),
        "'meh'": ({"experience": first.experience, "rating": "meh"}, "'up' or 'down'"),
        "42": ({"experience": first.experience, "rating": "down", "correction": 42}, "correction"),
        "message": ({"experience": first.experience, "rating": "down", "correction": {"role": "user"}},
                    "assistant message"),
        "extra": ({"experience": first.experience, "rating": "down", "stars": 5}, "stars"),
        "empty": ({"experience": "", "rating": "down"}, "experience"),
    }
    for case, (body, words) in refused.items():
        code, answer = serving.request("POST", "/nightschool/feedback", body)
        assert code == 422 and words in json.dumps(answer["detail"]), (case, answer)
    code, answer = serving.request("POST", "/nightschool/feedback", {"experience": "0" * 32, "rating": "down"})
    assert code == 404 and "there is no experience" in answer["detail"]
    code, _ = serving.request("POST", "/nightschool/feedback", {"experience": first.experience, "rating": "down"}, key=None)
    assert code == 401
    assert entry(first.experience) == unchanged  # nothing was changed by the refused calls
