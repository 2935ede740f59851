"""The student's work is never the teacher's (issue 42, part 3): capture records which model acted (each message's
`model`, the session's `models`) and who that was (`actor`): a real Codex rollout whose model is the student's served
name is stored as its own work and counted apart; a mixed session keeps only the teacher's turns as teacher work; a
capture.json "not a teacher" entry classifies the sessions already stored; migration 0017 on a store made before it."""
from __future__ import annotations

import importlib
import json

from sqlalchemy import select, text

from app.cli.main import main
from app.core.base.schema import AgentSession, MessageRow
from app.core.capture import actors
from app.core.capture.parsers.claude import parse_claude_with_subagents
from app.core.capture.parsers.codex import parse_codex
from app.core.capture.parsers.gemini import parse_gemini
from app.core.capture.queries import CaptureQueries
from app.core.capture.rows import parts_of
from app.core.capture.sources import CaptureConfig
from app.core.datasets.convert import conversation
from app.core.ship import serving
from tests.core.capture.rollouts import MIXED, MIXED_NAME, REAL2, STUDENT, TEACHER, rollout
from tests.pg import ANY_STORE, any_store  # noqa: F401 - fixture

STUDENT_NAME = serving.SERVED_MODEL


def _session(store, source_name: str) -> AgentSession:
    with store.session() as db:
        return db.scalars(select(AgentSession).where(AgentSession.source_path.like(f"%{source_name}"))).one()


def _rows(store, sid: str) -> list[MessageRow]:
    with store.session() as db:
        return db.scalars(select(MessageRow).where(MessageRow.session_id == sid, MessageRow.branch == 0)
                          .order_by(MessageRow.seq)).all()


def test_the_served_name_is_the_one_capture_knows():
    assert STUDENT_NAME in actors.SERVED_NAMES  # the name /v1/models lists is the student's in capture


def test_each_agents_transcripts_name_the_model_that_acted():
    """Claude Code's `message.model`, Codex's `turn_context.model`, Gemini's per-message `model` (real files)."""
    examples = REAL2 / "yoavf+ai-sessions" / "examples"
    assert parse_claude_with_subagents(examples / "claude-code-pomodoro-timer.jsonl").acting_models() == \
        ["claude-sonnet-4-5-20250929"]
    assert parse_codex(TEACHER).acting_models() == ["gpt-5.2-codex"]
    assert parse_gemini(examples / "gemini-cli-pomodoro-timer.json").acting_models() == ["gemini-2.5-pro"]


def test_names_match_whole_or_by_their_last_part_in_any_case_and_globs():
    names = actors.Students(("nightschool", "qwen2.5-coder*"))
    for model in ("nightschool", "NightSchool", "openai/nightschool", "nightschool/nightschool", "qwen2.5-coder:7b",
                  "ollama/qwen2.5-coder:7b"):
        assert names.student(model), model
    for model in (None, "", "gpt-5-codex", "claude-opus-4-5", "nightschool-teacher", "<synthetic>"):
        assert not names.student(model), model
    assert names.actor(["gpt-5-codex"]) == actors.TEACHER and names.actor([]) == actors.TEACHER
    assert names.actor("nightschool") == actors.STUDENT
    assert names.actor("gpt-5-codex,openai/nightschool") == actors.MIXED


def test_a_codex_rollout_of_the_student_is_stored_as_its_own_work_and_counted_apart(store, ingestor, roots, capsys):
    teacher = ingestor.ingest(rollout(TEACHER, roots["codex"]), agent="codex", final=True)
    student = ingestor.ingest(rollout(STUDENT, roots["codex"], STUDENT_NAME), agent="codex", final=True)
    assert teacher.status == student.status == "ok" and teacher.balanced and student.balanced

    own = _session(store, STUDENT.name)
    assert (own.actor, own.models, own.model) == ("student", STUDENT_NAME, STUDENT_NAME)
    assert {r.model for r in _rows(store, own.id) if r.role == "assistant"} == {STUDENT_NAME}  # per message too
    taught = _session(store, TEACHER.name)
    assert (taught.actor, taught.models) == ("teacher", "gpt-5.2-codex")

    totals = CaptureQueries(store).totals()
    assert totals.sessions == 2 and totals.by_actor == {"teacher": 1, "student": 1, "mixed": 0}
    listed = {s.id: s.actor for s in CaptureQueries(store).recent_sessions()}
    assert listed == {own.id: "student", taught.id: "teacher"}
    assert main(["capture", "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["by_actor"] == {"teacher": 1, "student": 1, "mixed": 0}
    assert main(["capture", "status"]) == 0
    assert "Sessions by who acted: teacher 1, the student's own work 1 (kept apart, never a teacher example), mixed 0" \
        in capsys.readouterr().out


def test_a_mixed_session_keeps_only_the_teachers_turns_as_teacher_work(store, ingestor, roots):
    path = rollout(MIXED, roots["codex"], STUDENT_NAME, from_request=2, name=MIXED_NAME)
    assert ingestor.ingest(path, agent="codex", final=True).status == "ok"
    mixed = _session(store, MIXED_NAME)
    assert (mixed.actor, mixed.models) == ("mixed", f"gpt-5-codex,{STUDENT_NAME}")
    assert CaptureQueries(store).totals().by_actor == {"teacher": 0, "student": 0, "mixed": 1}

    rows = _rows(store, mixed.id)
    whole = conversation(mixed, rows)
    taught = conversation(mixed, rows, students=actors.students())
    requests = [m["content"] for m in taught.messages if m["role"] == "user"]
    assert taught.student_turns == 2 and whole.student_turns == 0
    assert len(requests) == 1 and requests[0].startswith("Build a simple Pomodoro timer")  # the first request only
    calls = lambda conv: [c["id"] for m in conv.messages for c in m.get("tool_calls") or []]  # noqa: E731
    by = lambda model: {p.call_id for r in rows if r.role == "assistant" and r.model == model  # noqa: E731
                        for p in parts_of(r) if p.kind == "tool_call"}
    assert len(calls(whole)) == 18 and len(by(STUDENT_NAME)) == 10  # the student made 2 + 8 of them
    assert set(calls(taught)) == by("gpt-5-codex") and len(calls(taught)) == 8  # the teacher's only
    results = {m["tool_call_id"] for m in taught.messages if m["role"] == "tool"}
    assert results == set(calls(taught))  # and only their results


def test_a_not_a_teacher_entry_in_capture_json_classifies_what_is_stored_and_what_comes(store, ingestor, roots):
    ingestor.ingest(rollout(TEACHER, roots["codex"]), agent="codex", final=True)
    before = _session(store, TEACHER.name)
    assert actors.current(store).student("gpt-5.2-codex") is False and before.actor == "teacher"

    config = CaptureConfig(roots=ingestor.config.roots, not_teachers=["GPT-5.2*"])
    config.save()
    assert actors.current(store).student("gpt-5.2-codex")
    after = _session(store, TEACHER.name)
    assert after.actor == "student" and after.updated_at > before.updated_at  # read again by builds and counts
    assert actors.classified(store, actors.students()) == 0  # the same names: nothing to do

    ingestor.config = config  # a session stored from now on is classified as it is written
    ingestor.ingest(rollout(STUDENT, roots["codex"]), agent="codex", final=True)
    assert _session(store, STUDENT.name).actor == "teacher"  # gpt-5.1-codex-max is not listed
    ingestor.ingest(rollout(STUDENT, roots["codex"], "gpt-5.2-codex"), agent="codex", final=True)
    assert _session(store, STUDENT.name).actor == "student"


def test_connect_remembers_the_names_a_tool_asks_for(store):
    assert actors.remember(["local-coder", " "]) == ["local-coder"]
    assert actors.remember(["local-coder"]) == ["local-coder"]  # once
    names = actors.students()
    assert names.student("openai/local-coder") and names.student(STUDENT_NAME) and not names.student("gpt-5")


@ANY_STORE
def test_migration_0017_gives_sessions_stored_before_their_models_then_their_actor(any_store):
    """Down to 0016, two sessions written as 0016 wrote them (one the student's by its model), up again: each has its
    stored model as its models and is the teacher's as it counted; the first reader with the names derives the
    student's. Down again: the columns go, the rows stay."""
    from alembic import command

    from app.core.base.store import alembic_config

    importlib.import_module("app.core.base.migrations.versions.0017_session_actors")
    cfg = alembic_config(any_store.url)
    with any_store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0016")
    with any_store.engine.begin() as conn:
        for sid, model in (("old-teacher", "gpt-5-codex"), ("old-student", STUDENT_NAME), ("old-none", None)):
            conn.execute(text("INSERT INTO sessions (id, agent, native_id, source_path, updated_at, messages, model) "
                              "VALUES (:id, 'codex', :native, '/a/s.jsonl', :t, 1, :m)"),
                         {"id": sid, "native": sid, "t": "2026-01-01 00:00:00", "m": model})
    with any_store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    with any_store.session() as db:
        got = {r.id: (r.models, r.actor) for r in db.scalars(select(AgentSession))}
    assert got == {"old-teacher": ("gpt-5-codex", "teacher"), "old-student": (STUDENT_NAME, "teacher"),
                   "old-none": (None, "teacher")}
    assert actors.counts(any_store, actors.students()) == {"teacher": 2, "student": 1, "mixed": 0}
    with any_store.session() as db:
        assert db.get(AgentSession, "old-student").actor == "student"
    with any_store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0016")
    with any_store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sessions")).scalar() == 3
    with any_store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
