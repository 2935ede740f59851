"""Stored blind tests written as rows (real SQLite), for tests about what happens after a test is drawn (drawing one
needs a held-out set's evaluation: the `blind_school` fixture): contexts shaped as a held-out set holds them."""
from __future__ import annotations

import json

from app.core.base.schema import BlindTestRow, BlindTrialRow

SYSTEM = {"role": "system", "content": "You are a coding agent.\n\nTools: Bash, Read, Edit. Call a tool by writing "
                                       "<tool_call>{\"name\": …, \"arguments\": {…}}</tool_call>."}


def call(name: str, **arguments) -> str:
    """A tool call in the Hermes text of a stored answer."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def context(task: str, ran: str = "pytest -q tests/test_parser.py", result: str = "1 failed, 3 passed") -> list[dict]:
    """A held-out context: the task, a first command and its result."""
    return [SYSTEM, {"role": "user", "content": task},
            {"role": "assistant", "content": "I will run the parser's tests first.",
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "Bash", "arguments": {"command": ran}}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "Bash", "content": result}]


def stored_test(store, base_model: str, judge: str, trials: list[dict], checkpoint_id: int | None = None,
                label: str = "base") -> int:
    """A blind test of `base_model` by `judge` with `trials` ({messages, teacher, student, agent_side, session_id,
    and optionally key, pick, better}); its id."""
    with store.session() as s:
        test = BlindTestRow(base_model=base_model, checkpoint_id=checkpoint_id, label=label, judge=judge, seed=1)
        s.add(test)
        s.flush()
        for i, t in enumerate(trials):
            s.add(BlindTrialRow(test_id=test.id, position=i, context_key=t.get("key", f"key-{i}"),
                                session_id=t["session_id"], turn=len(t["messages"]),
                                context_json=json.dumps(t["messages"]), teacher=t["teacher"], student=t["student"],
                                outcome="", agent_side=t["agent_side"], pick=t.get("pick"), better=t.get("better")))
        return test.id
