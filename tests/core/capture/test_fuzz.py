"""Fuzzed transcripts (hypothesis): the importer never crashes and, for every import, lines in = stored +
quarantined + skipped, summed over appends equal to the file's lines, with one quarantine row per bad line."""
from __future__ import annotations

import json
import sqlite3

from hypothesis import HealthCheck, given, settings, strategies as st

from app.core.base.store import Store
from app.core.capture.ingest import Ingestor
from app.core.scrub.scrubber import Scrubber
from app.core.capture.sources import CaptureConfig
from tests.core.capture.helpers import assistant, call, result, text, user

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                            st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                           max_leaves=8)
uuids = st.sampled_from(["u1", "u2", "a1", "a2", "x", None])
claude = st.one_of(
    st.builds(lambda u, p, t: user(u, p, t), uuids, uuids, st.text(max_size=30)),
    st.builds(lambda u, p, m: assistant(u, p, [text("ok"), call("c1", "Read", path="/x")], msg_id=m), uuids, uuids,
              st.sampled_from(["m1", "m2", None])),
    st.builds(lambda u, p, e: user(u, p, [result("c1", "out", is_error=e)]), uuids, uuids, st.booleans()),
    st.builds(lambda t, extra: {"type": t, **extra}, st.sampled_from(["summary", "system", "progress", "weird", ""]),
              st.dictionaries(st.sampled_from(["uuid", "message", "sessionId", "subtype"]), json_values, max_size=3)),
)
codex = st.builds(lambda t, p: {"timestamp": "2025-01-01T00:00:00Z", "type": t, "payload": p},
                  st.sampled_from(["session_meta", "response_item", "event_msg", "turn_context", "compacted", "x"]),
                  st.one_of(json_values, st.fixed_dictionaries({"type": st.sampled_from(
                      ["message", "function_call", "function_call_output", "reasoning", "user_message"]),
                      "role": st.sampled_from(["user", "assistant"]), "content": json_values})))
gemini = st.one_of(
    st.builds(lambda i, t, c: {"id": i, "type": t, "content": c, "timestamp": "2025-01-01T00:00:00Z"},
              st.sampled_from(["g1", "g2", "g3"]), st.sampled_from(["user", "gemini", "info", "odd"]), json_values),
    st.builds(lambda i: {"$rewindTo": i}, st.sampled_from(["g1", "g9"])),
    st.builds(lambda v: {"$set": {"lastUpdated": v}}, st.text(max_size=10)),
)
garbage = st.one_of(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), st.just(b""), st.just(b"\r"),
                    st.just(b"{\"type\": \"user\""), json_values.map(lambda v: json.dumps(v).encode()))
FIRST = {"claude-code": user("u0", None, "start"), "codex": {"timestamp": "2025-01-01T00:00:00Z", "type": "session_meta",
         "payload": {"id": "s1", "cwd": "/w"}}, "gemini": {"sessionId": "g", "projectHash": "h", "startTime": "x"}}
NAMES = {"claude-code": "p/11111111-2222-3333-4444-555555555555.jsonl", "codex": "2025/01/01/rollout-1.jsonl",
         "gemini": "h/chats/session-1.jsonl"}


def lines_of(agent, draw_records):
    return [json.dumps(FIRST[agent]).encode()] + draw_records


@st.composite
def corpus(draw):
    agent = draw(st.sampled_from(sorted(FIRST)))
    records = {"claude-code": claude, "codex": codex, "gemini": gemini}[agent]
    body = draw(st.lists(st.one_of(records.map(lambda r: json.dumps(r).encode()), garbage), max_size=25))
    lines = lines_of(agent, body)
    crlf = draw(st.booleans())
    data = b"".join(line + (b"\r\n" if crlf else b"\n") for line in lines)
    tail = draw(st.one_of(st.just(b""), garbage))  # a last line still being written
    cut = draw(st.integers(0, len(data)))
    return agent, data + tail, cut


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=corpus(), final=st.booleans())
def test_fuzzed_files_never_crash_and_counts_always_balance(tmp_path_factory, case, final):
    agent, data, cut = case
    base = tmp_path_factory.mktemp("fuzz")
    root = base / agent
    path = root / NAMES[agent]
    path.parent.mkdir(parents=True)
    store = Store(base / "db.sqlite")
    ingestor = Ingestor(store, CaptureConfig(roots={agent: [str(root)]}), Scrubber(home="/home/me"))
    try:
        path.write_bytes(data[:cut])  # first the part written so far, then the rest: two ingests
        results = [ingestor.ingest(path, final=False)]
        path.write_bytes(data)
        results.append(ingestor.ingest(path, final=final))
        done = [r for r in results if r is not None]
        assert all(r.status == "ok" and r.balanced for r in done), [(r.status, r.message) for r in done]
        con = sqlite3.connect(store.path)
        lines_in, stored, quarantined, skipped = con.execute(
            "select sum(lines_in), sum(stored), sum(quarantined), sum(skipped) from imports").fetchone()
        complete = data.count(b"\n") + (1 if final and not data.endswith(b"\n") else 0)
        assert lines_in == complete == stored + quarantined + skipped
        assert min(stored, quarantined, skipped) >= 0
        assert quarantined == con.execute("select count(*) from quarantine").fetchone()[0]
    finally:
        store.close()
