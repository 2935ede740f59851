"""The behavioural reward scored on the teacher's own actions: on real transcripts the teacher's recorded next actions
score at least as well as weaker answers (text only, the wrong tool, a repeated failure, nothing), part by part; and
the parts table (teacher / base / candidate) from an evaluation's generations rows, as the report card shows it."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from app.core.base.schema import AgentSession, MessageRow
from app.core.capture.ingest import Ingestor
from app.core.datasets.contexts import teacher_contexts
from app.core.datasets.convert import conversation
from app.core.importer import import_paths
from app.core.judge.reward_context import RewardContext
from app.core.judge.rewards import (
    DEFAULT_WEIGHTS,
    answer_breakdowns,
    parts_table,
    score,
    teacher_breakdowns,
)
from app.core.toolcalls.convention import as_text
from tests.core.capture.helpers import REAL

REAL2 = REAL.parent / "real-world-2"
TRANSCRIPTS = [  # a Codex session (shell calls, failures) and a Claude Code one (Read / Edit / Bash / Task …)
    REAL2 / "MoonLadderStudios+MoonMind" / ".codex" / "sessions" / "2025" / "11" / "13" /
    "rollout-2025-11-13T16-00-16-019a7fa9-a846-7393-8d7a-9997d08b0096.jsonl",
    REAL2 / "OpenCoworkAI+open-cowork" / ".claude" / "projects" / "-Users-liuyusen-Desktop---------VLM" /
    "04872614-7a20-43c0-8885-83854894eabc.jsonl",
]
RAMBLE = ("First, I need to understand the problem because the user asked for it. Then I should look at the files "
          "before changing anything. I must be careful since the code may have tests. Next I will check the "
          "configuration, and finally I will make sure everything works.")


def tc(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def weaker_answers(ctx: RewardContext) -> dict[str, str]:
    """Answers a model that does not do what the teacher did gives: prose instead of the action (short, or a long
    reasoning ramble), the wrong tool, a tool the session does not have, the failing call again, nothing."""
    theirs = {c["name"] for c in ctx.teacher_calls}
    other = next((t for t in ctx.tools if t not in theirs), None)
    answers = {"short text": "Let me take a look at this.", "ramble": RAMBLE, "nothing": "",
               "unknown tool": tc("DeleteEverything", path=".")}
    if other:
        answers["wrong tool"] = tc(other, path="README.md")
    if ctx.failed_call:
        answers["the failure again"] = tc(ctx.failed_call["name"], **ctx.failed_call["arguments"])
    return answers


def real_contexts(path, store) -> list[tuple[str, RewardContext]]:
    """(the teacher's recorded action as text, its reward context) at every next action of a real transcript."""
    import_paths(Ingestor(store), [path])
    records = []
    with store.session() as s:
        for sess in s.scalars(select(AgentSession)).all():
            rows = s.scalars(select(MessageRow).where(MessageRow.session_id == sess.id, MessageRow.branch == 0)
                             .order_by(MessageRow.seq)).all()
            records.append({"messages": conversation(sess, rows).messages, "session_id": sess.id})
    found = teacher_contexts(records, max_contexts=10_000)
    return [(as_text(c.teacher)["content"], RewardContext.from_messages(c.messages, c.teacher)) for c in found]


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=["codex", "claude"])
def test_the_teachers_own_actions_score_at_least_as_well_as_weaker_answers_part_by_part(path, store):
    if not path.is_file():
        pytest.skip(f"the shared real-world-2 fixtures are not here ({path})")
    cases = real_contexts(path, store)
    assert len(cases) >= 10, f"only {len(cases)} next actions in {path.name}"
    parts = (*DEFAULT_WEIGHTS, "total")
    teacher = {p: sum(getattr(score(t, c), p) for t, c in cases) / len(cases) for p in parts}
    above = {}
    for kind in sorted({k for _, c in cases for k in weaker_answers(c)}):
        given = [(a[kind], c) for _, c in cases if kind in (a := weaker_answers(c))]
        weaker = {p: sum(getattr(score(a, c), p) for a, c in given) / len(given) for p in parts}
        if below := {p: (round(teacher[p], 3), round(weaker[p], 3)) for p in parts if teacher[p] < weaker[p] - 1e-9}:
            above[f"{kind} ({len(given)} cases)"] = below
    assert not above, f"weaker answers score above the teacher (teacher, weaker): {above}"
    assert teacher["total"] >= 0.8, teacher


# --- the parts table --------------------------------------------------------------------------------------------

READ = {"name": "Read", "arguments": {"file_path": "a.py"}}


def row(key: str, student: str, ctx: RewardContext) -> dict:
    return {"key": key, "teacher": ctx.teacher_text + tc("Read", file_path="a.py"), "student": student, "outcome": "",
            "reward_context": ctx.to_row()}


def test_the_parts_table_puts_teacher_base_and_candidate_side_by_side_on_shared_next_actions():
    from app.core.runtime.school.report_card import reward_parts

    ctx = RewardContext(tools=["Read", "Edit"], teacher_calls=[READ])
    base = [row("k1", RAMBLE, ctx), row("k2", "Let me look.", ctx), row("k3", tc("Edit", file_path="a.py"), ctx)]
    cand = [row("k1", tc("Read", file_path="a.py"), ctx), row("k2", tc("Read", file_path="b.py"), ctx)]
    card = reward_parts(base, cand)
    assert card["n"] == 2  # k3 is not in the candidate's evaluation
    assert set(card["parts"]) == {*DEFAULT_WEIGHTS, "total"}
    assert card["weights"] == pytest.approx({k: v / sum(DEFAULT_WEIGHTS.values())
                                             for k, v in DEFAULT_WEIGHTS.items()}, abs=1e-4)
    eff = card["parts"]["efficiency"]
    assert eff == {"teacher": 1.0, "base": 0.0, "candidate": pytest.approx(0.85)}
    assert card["parts"]["total"]["teacher"] >= card["parts"]["total"]["candidate"] > card["parts"]["total"]["base"]
    assert card["teacher_below"] == {"base": [], "candidate": []}
    assert "efficiency" not in card["fell"] and "total" not in card["fell"]
    # rows written before the reward context was stored: no table
    old = [{k: v for k, v in r.items() if k != "reward_context"} for r in cand]
    assert reward_parts(base, old) is None
    assert teacher_breakdowns(old) == {} and answer_breakdowns(old) == {}
    assert parts_table({}, base={}) is None


def test_the_parts_table_is_printed_by_the_cli_and_said_by_the_school_tab(capsys):
    from app.cli.school_print import print_reward_parts
    from app.ui.school.words import reward_part_lines

    ctx = RewardContext(tools=["Read"], teacher_calls=[READ])
    teacher = teacher_breakdowns([row("k", "", ctx)])
    table = parts_table(teacher, base=answer_breakdowns([row("k", tc("Read", file_path="a.py"), ctx)]),
                        candidate=answer_breakdowns([row("k", "Let me look.", ctx)]))
    card = {"reward_parts": {**table, "fell": ["efficiency", "total"]}}
    print_reward_parts(card["reward_parts"])
    out = capsys.readouterr().out
    assert "Reward parts (n=1)" in out and "teacher" in out and "candidate" in out
    assert any(line.split()[0] == "efficiency" and line.rstrip().endswith("fell") for line in out.splitlines()[1:])
    lines = reward_part_lines(card)
    assert lines[0].startswith("Reward parts, teacher / base / candidate (1 next actions)")
    assert "  efficiency: 1.000 / 1.000 / 0.000 ↓ fell" in lines
    assert reward_part_lines({}) == [] and reward_part_lines({"reward_parts": None}) == []


def test_a_cycles_report_card_carries_the_parts_from_its_stored_evaluations(store, tmp_path):
    from types import SimpleNamespace

    from app.core.base.schema import EvalRow
    from app.core.judge.report import GENERATIONS, write_rows
    from app.core.runtime.school.report_card import report_card

    ctx = RewardContext(tools=["Read", "Edit"], teacher_calls=[READ], teacher_text="Reading a.py.")
    answers = {"base": [RAMBLE, tc("Read", file_path="a.py")],  # the base rambles once, acts once
               "candidate": ["Reading it." + tc("Read", file_path="a.py"), "Reading it."]}
    ids = {}
    with store.session() as s:
        for name, texts in answers.items():
            folder = tmp_path / name
            folder.mkdir()
            write_rows(folder / GENERATIONS, [row(f"k{i}", t, ctx) for i, t in enumerate(texts)])
            ev = EvalRow(base_model="m", label=name, eval_set="set", eval_set_sha256="0" * 64,
                         settings_sha256="0" * 64, report_path=str(folder / "report.json"))
            s.add(ev)
            s.flush()
            ids[name] = ev.id
    cycle = SimpleNamespace(id=7, inputs={}, times={}, outputs={"judging": {"evals": ids, "verdict": "fail"}})
    parts = report_card(store, cycle)["reward_parts"]
    assert parts["n"] == 2
    assert parts["parts"]["reasoning"]["teacher"] == 1.0  # the teacher's own line fits itself
    assert parts["parts"]["reasoning"]["base"] < parts["parts"]["reasoning"]["candidate"]  # the ramble costs
    assert parts["parts"]["efficiency"] == {"teacher": 1.0, "base": 0.5, "candidate": 0.5}
    assert parts["teacher_below"]["base"] == []
    assert all(parts["parts"][p]["candidate"] < parts["parts"][p]["base"] for p in parts["fell"])
