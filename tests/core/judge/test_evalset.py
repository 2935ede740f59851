"""The held-out next actions are independent evidence: drawn round-robin across sessions up to the cap, and a polling
loop's near-identical contexts (same session, same teacher call, same last messages once numbers are set aside)
counted once; deterministic. Reports written before the draw was a setting still read, as drawn by hash."""
from __future__ import annotations

import json
import random
from collections import Counter
from itertools import count

from app.core.judge.evalset import EvalConfig, contexts, near_key
from app.core.judge.report import EvalReport, EvalSettings

SYSTEM = {"role": "system", "content": "You are a coding agent."}
IDS = count()


def call(name: str, **arguments) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{next(IDS)}", "type": "function", "function": {"name": name, "arguments": arguments}}]}


def tool(text: str) -> dict:
    return {"role": "tool", "content": text}


def polling(session: str, polls: int = 20) -> dict:
    """The issue's chatty session: a background test run polled with BashOutput, "still running" each time."""
    msgs = [SYSTEM, {"role": "user", "content": "run the test suite"}, call("Bash", command="pytest", background=True),
            tool("started shell 7f3a")]
    for i in range(polls):
        msgs += [call("BashOutput", bash_id="7f3a"), tool(f"<status>running</status>  elapsed {12 + 5 * i} s")]
    msgs += [call("BashOutput", bash_id="7f3a"), tool("412 passed in 131 s"),
             {"role": "assistant", "content": "All 412 tests pass."}]
    return {"id": f"{session}-w0", "session_id": session, "messages": msgs}


def quiet(session: str) -> dict:
    """A session with three distinct actions."""
    return {"id": f"{session}-w0", "session_id": session, "messages": [
        SYSTEM, {"role": "user", "content": f"fix the bug in {session}.py"},
        call("Read", path=f"{session}.py"), tool(f"def {session}(): return 1"),
        call("Edit", path=f"{session}.py", old="return 1", new="return 2"), tool("edited"),
        {"role": "assistant", "content": f"Fixed {session}.py."}]}


RECORDS = [polling("chatty")] + [quiet(f"s{i}") for i in range(5)]


def test_next_actions_spread_across_sessions_and_a_polling_loop_counts_once():
    every_poll = contexts(RECORDS, EvalSettings(max_contexts=1000, draw="hash"))
    assert Counter(c.session_id for c in every_poll)["chatty"] == 23  # Bash, 21 polls, the answer
    lumpy = contexts(RECORDS, EvalSettings(max_contexts=12, draw="hash"))
    assert Counter(c.session_id for c in lumpy)["chatty"] > 4, lumpy  # the old draw: mostly the chatty session
    found = contexts(RECORDS, EvalSettings(max_contexts=12))
    assert Counter(c.session_id for c in found) == {s: 2 for s in ["chatty", "s0", "s1", "s2", "s3", "s4"]}
    assert len({near_key(c) for c in found}) == len(found)
    every = contexts(RECORDS, EvalSettings(max_contexts=1000))
    chatty = [c for c in every if c.session_id == "chatty"]
    # Bash; the first poll (after "started"); the 20 "still running" polls as one; the last poll's answer
    assert len(chatty) == 4 and len(every) == 4 + 5 * 3
    polls = [c for c in chatty if c.teacher.get("tool_calls") and c.messages[-1]["content"].startswith("<status>")]
    assert len(polls) == 1 and polls[0].turn == 6  # the earliest of the near-identical polls
    assert [c.session_id for c in every] == sorted(c.session_id for c in every)


def test_the_draw_is_deterministic_and_follows_its_seed():
    shuffled = [json.loads(json.dumps(r)) for r in RECORDS]
    random.Random(4).shuffle(shuffled)
    keys = [c.key for c in contexts(RECORDS, EvalSettings(max_contexts=9))]
    assert keys == [c.key for c in contexts(shuffled, EvalSettings(max_contexts=9))]
    fewer = contexts(RECORDS, EvalSettings(max_contexts=4))  # fewer than the sessions: one each from four
    assert len({c.session_id for c in fewer}) == 4
    assert {c.key for c in contexts(RECORDS, EvalSettings(max_contexts=9, seed=1))} != set(keys)


def test_a_report_from_before_the_draw_setting_reads_as_drawn_by_hash():
    new = EvalReport(label="base", base_model="m", eval_set="d/test", eval_set_sha256="s" * 64)
    assert new.settings.draw == "sessions"
    assert EvalReport.model_validate_json(new.model_dump_json()).settings.draw == "sessions"
    old = json.loads(new.model_dump_json())
    del old["settings"]["draw"]
    assert EvalReport.model_validate(old).settings.draw == "hash"  # a GGUF judged "the same way" draws the same
    config = dict(eval_file="f", eval_set="d/test", eval_set_sha256="s" * 64)
    assert (EvalConfig(**config).settings_sha256()  # a cached evaluation of the old draw is not reused
            != EvalConfig(**config, settings=EvalSettings(draw="hash")).settings_sha256())
