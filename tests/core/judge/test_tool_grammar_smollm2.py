"""The real SmolLM2 GGUF on held-out coding-agent turns, judged by the llama.cpp worker and served over real HTTP with the same tools: under the tool-call grammar no call is invalid, and the two decode alike."""
from __future__ import annotations

import pytest

from app.core.judge import evalset, nextaction
from app.core.judge.evaluate import choose_set
from app.core.judge.gguf import evaluate_gguf
from app.core.judge.records import Target
from app.core.judge.report import GENERATIONS, EvalSettings, read_rows
from app.core.judge.reward_context import RewardContext
from app.core.ship import serving as S
from app.core.toolcalls.convention import arguments_of, as_text, parse_student
from tests.conftest import write_jsonl

pytestmark = pytest.mark.slow
SETTINGS = EvalSettings(evaluator="llama.cpp", max_contexts=12, max_new_tokens=48, max_examples=1, samples=0)
TASKS = [("Run the tests with pytest -q.", "Bash", {"command": "pytest -q"}),
         ("Show me what is in app/main.py.", "Read", {"file_path": "app/main.py"}),
         ("List the files in this folder.", "Bash", {"command": "ls -la"}),
         ("Read README.md, please.", "Read", {"file_path": "README.md"}),
         ("In app/util.py replace `x = 1` with `x = 2`.", "Edit",
          {"file_path": "app/util.py", "old_string": "x = 1", "new_string": "x = 2"}),
         ("What does git status say?", "Bash", {"command": "git status"}),
         ("Open src/lib.rs and check the imports.", "Read", {"file_path": "src/lib.rs"}),
         ("Count the lines of code: run wc -l *.py.", "Bash", {"command": "wc -l *.py"}),
         ("Fix the typo 'teh' in docs/index.md.", "Edit",
          {"file_path": "docs/index.md", "old_string": "teh", "new_string": "the"}),
         ("Look at tests/test_app.py and tell me if a test uses `a < b`.", "Read", {"file_path": "tests/test_app.py"}),
         ("Run the linter: ruff check .", "Bash", {"command": "ruff check ."}),
         ("What is 2 + 2?", None, "4.")]


def said(message: dict) -> tuple[str, list]:
    """An answer's words and calls (name, arguments), however it carries them: `tool_calls` or `<tool_call>` text."""
    return ((message.get("content") or "").strip(),
            [(c["function"]["name"], arguments_of(c["function"]["arguments"])) for c in message.get("tool_calls") or []])


def heldout_records() -> list[dict]:
    """Coding-agent turns in the sessions' convention (the system message names Bash, Read and Edit): the teacher
    calls a tool, or answers in text."""
    from engine.workers.smoke import TOOL_PROMPT

    records = []
    for i, (task, tool, args) in enumerate(TASKS):
        answer = ({"role": "assistant", "content": args} if tool is None else
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"type": "function", "function": {"name": tool, "arguments": args}}]})
        records.append({"session_id": f"task-{i}", "messages": [TOOL_PROMPT[0], {"role": "user", "content": task},
                                                                 answer]})
    return records


def test_smollm2_calls_parse_under_the_grammar_judged_and_served_alike(store, smollm2_folder, tmp_path, capsys):
    from engine.loading import embedded_gguf

    target, gguf = Target(str(smollm2_folder)), embedded_gguf()
    evset = choose_set(store, target, file=write_jsonl(tmp_path / "heldout.jsonl", heldout_records()))

    # Judged: the llama.cpp evaluation worker, the grammar on by default.
    assert SETTINGS.grammar
    judged = evaluate_gguf(store, target, gguf, evset, SETTINGS, "q4_1", force=True)
    rows = {r["key"]: r for r in read_rows(judged.folder / GENERATIONS)}
    assert judged.report.settings.grammar and len(rows) == judged.report.contexts == len(TASKS)
    assert judged.report.outcomes.get("invalid_call", 0) == 0, judged.report.outcomes
    assert all(r["valid"] == r["attempted"] for r in rows.values()), [r["why"] for r in rows.values()]
    assert any("```" in r["student"] for r in rows.values())  # free text (code) still flows under the grammar

    # Served: the same contexts with their tools over HTTP; the server decodes them under the same grammar.
    schemas = evalset.tool_schemas([evset.path])
    found = evalset.contexts(list(evalset.read_records(evset.path)), SETTINGS)
    S.start(S.Model(name="smollm2", path=str(gguf), sha256=""), port=0)
    try:
        same, served = 0, []
        for ctx in found:
            names = RewardContext.from_messages(ctx.messages, ctx.teacher).tools
            tools = [{"type": "function", "function": {"name": n, "parameters": schemas.get(n)}} for n in names]
            code, answer = S.request("POST", "/v1/chat/completions", {
                "messages": ctx.messages, "tools": tools, "max_tokens": SETTINGS.max_new_tokens, "temperature": 0.0})
            assert code == 200, answer
            message = answer["choices"][0]["message"]  # the calls in `tool_calls`, written back as the judge reads
            text = as_text(message)["content"].strip()
            got = nextaction.judge(ctx.teacher, text, names, schemas)
            served.append(got.outcome)
            assert got.outcome != "invalid_call" and got.valid == got.attempted, (text, got.why)
            same += said(message) == said(parse_student(rows[ctx.key]["student"]))
    finally:
        S.stop()
    with capsys.disabled():
        print(f"\n{len(found)} contexts, {sum(r['attempted'] for r in rows.values())} calls attempted: judged "
              f"{judged.report.outcomes}, served "
              f"{ {o: served.count(o) for o in sorted(set(served))} }, identical answers {same}")
    assert same >= len(found) - 2  # greedy on one file and template: the judge measures what is served
