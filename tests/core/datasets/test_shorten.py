"""Keep the teacher's decision, shorten the evidence: a real transcript whose tool result is too long for the window
is built through the real worker; the decision after that result is in an example, the result cut head and tail
with a marker, and not one assistant token differs from the uncut conversation's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from app.core.base.schema import AgentSession, MessageRow
from app.core.capture.ingest import Ingestor
from app.core.datasets.convert import conversation
from app.core.importer import import_paths
from tests.core.capture.helpers import REAL
from tests.core.datasets.helpers import records

# a real Codex rollout (EdofEngland/code_butler, Apache-2.0): its `rg` result is 14 842 characters, far over a
# 1024-token window of the tiny tokenizer even after the 2000-character clip
CODEX = REAL.parent / "real-world-2" / "EdofEngland+code_butler" / ".codex" / "sessions" / "2025" / "11" / "24" / \
    "rollout-2025-11-24T12-46-26-019ab730-4906-7b12-8569-c53c5dde1150.jsonl"


def trained_ids(renderer, messages: list[dict]) -> list[int]:
    rendered = renderer.render(messages)
    return [t for t, m in zip(rendered["input_ids"], rendered["assistant_masks"]) if m]


@pytest.mark.skipif(not CODEX.is_file(), reason=f"the shared real-world-2 fixtures are not here ({CODEX})")
def test_the_decision_after_an_over_long_real_tool_result_reaches_an_example(store, build, tiny_model):
    from engine import render

    import_paths(Ingestor(store), [CODEX])
    with store.session() as s:
        sess = s.scalars(select(AgentSession)).one()
        full = conversation(sess, s.scalars(select(MessageRow).where(
            MessageRow.session_id == sess.id, MessageRow.branch == 0).order_by(MessageRow.seq)).all()).messages
    long = max((i for i, m in enumerate(full) if m["role"] == "tool"), key=lambda i: len(full[i]["content"]))
    after = next(i for i in range(long + 1, len(full)) if full[i]["role"] == "assistant")  # the decision it led to

    outcome, ds = build(max_length=1024, val_share=0.0, test_share=0.0)
    assert outcome.ok, outcome.message
    examples = records(Path(ds.path), "train")
    taught = [r for r in examples if full[after] in r["messages"]]
    assert taught, "the teacher's decision after the long result reached no example"
    with_evidence = []
    for r in taught:
        at = r["messages"].index(full[after])
        cut = [m for m in r["messages"][:at] if m.get("tool_call_id") == full[long]["tool_call_id"]]
        if cut:
            with_evidence.append((r, cut[0]))
    assert with_evidence, "the decision is never seen after the result it followed"
    example, tool = with_evidence[0]
    original = full[long]["content"]
    assert "[cut " in tool["content"] and len(tool["content"]) < len(original)
    assert original.startswith(tool["content"].split("\n…[cut ")[0])  # head kept
    assert original.endswith(tool["content"].split(" characters]…\n")[-1])  # tail kept

    # the assistant turns are the conversation's, and so is every trained token
    assert all(m in full for m in example["messages"] if m["role"] == "assistant")
    uncut = [next(f for f in full if f.get("tool_call_id") == m["tool_call_id"]) if m["role"] == "tool" else
             full[1] if m["role"] == "user" and m is example["messages"][1] else m for m in example["messages"]]
    renderer = render.load(str(tiny_model), tiny_model.parent)
    ids = [t for t, m in zip(example["input_ids"], example["assistant_masks"]) if m]
    assert ids and ids == trained_ids(renderer, uncut)
    assert len(example["input_ids"]) <= 1024

    counts = json.loads((Path(ds.path) / "manifest.json").read_text())["counts"]
    assert counts["tool results shortened"] >= 1 and counts["characters cut"] > 0
