"""A held-out context a blind-test pair was made of is set aside: a blind trial judged the student's answer worse on
context K (a person's trial: its pair joins the refining stage's preference build by default, counted by source), and
from then on neither the judge's next-action draw, nor its loss examples, nor the next blind draw hold K (nor a
near-identical context, nor a window holding the same action); the draws take other contexts instead, or hold fewer
and the evaluation says why. The set's sha256 covers what was set aside, so the cached evaluation from before is not
reused. Real SQLite, a real evaluation worker on the tiny model; the blind draw on its (transformers) answers — the
served decoding's draw is the slow blind-school tests'."""
from __future__ import annotations

import json
from pathlib import Path

from app.core.base import protocol as P
from app.core.base.fingerprint import sha256_file
from app.core.datasets import manifest as manifests
from app.core.datasets.catalog import Registry
from app.core.datasets.pair_records import BLIND, blind_contexts
from app.core.datasets.pairs import PairsConfig, build, plan
from app.core.judge import evalset
from app.core.judge.blind import trials as T
from app.core.judge.blind.draw import answered, draw
from app.core.judge.evaluate import Evaluation, choose_set, evaluate, generations
from app.core.judge.records import Target
from app.core.judge.report import LOSSES, EvalSettings, read_rows
from app.core.toolcalls.convention import as_text
from tests.core.datasets.test_pairs_agreement import Scripted, built_sft, example
from tests.core.judge.blind_rows import call as hermes_call, stored_test
from tests.core.judge.test_evalset import RECORDS

SETTINGS = EvalSettings(max_contexts=10, max_new_tokens=8, samples=1)
HELD = [example(f"h{i}", 2) for i in range(4)]  # 4 held-out sessions, 3 next actions each: 12, 10 drawn
LIST = hermes_call("Bash", command="ls")


def _judged(store, model: str, judge: str, ctx, student_was: str) -> None:
    """A blind test of the base model by `judge` with one trial on `ctx`, answered: the student's answer `worse`,
    `better` or `same`."""
    test = stored_test(store, model, judge, [{"messages": ctx.messages, "teacher": as_text(ctx.teacher)["content"],
                                              "student": LIST, "agent_side": "A", "session_id": ctx.session_id,
                                              "key": ctx.key}])
    better = {"worse": "A", "better": "B", "same": "same"}[student_was]
    T.answer(store, T.load(store, test).trials[0].id, "cant_tell", better, 2.0)


def test_a_context_set_aside_leaves_with_its_near_twins_and_the_loss_examples_holding_it():
    settings = EvalSettings(max_contexts=12)
    every = evalset.contexts(RECORDS, EvalSettings(max_contexts=1000))
    poll = next(c for c in every if c.session_id == "chatty" and c.turn == 6)  # the loop's 20 polls, drawn once
    quiet = next(c for c in every if c.session_id == "s0")
    before = evalset.contexts(RECORDS, settings)
    after = evalset.contexts(RECORDS, settings, frozenset({poll.key, quiet.key}))
    assert len(before) == len(after) == 12  # the draw takes two others instead
    assert not {poll.key, quiet.key} & {c.key for c in after}
    assert not any(evalset.near_key(c) == evalset.near_key(poll) for c in after)  # no other poll of the loop
    left = evalset.contexts(RECORDS, EvalSettings(max_contexts=1000), frozenset({poll.key, quiet.key}))
    assert len(left) == len(every) - 2  # the loop's other polls were never separate next actions
    hashed = evalset.contexts(RECORDS, EvalSettings(max_contexts=12, draw="hash"), frozenset({quiet.key}))
    assert len(hashed) == 12 and quiet.key not in {c.key for c in hashed}  # reports from before draw by hash
    assert evalset.contexts(RECORDS, settings, frozenset({"not in this set"})) == before

    # the same action in two overlapping windows: setting its (longest) context aside takes both windows' loss
    whole = example("w", 3)["messages"]
    first = {"id": "w0", "session_id": "w", "messages": whole[:2] + whole[2:6]}
    second = {"id": "w1", "session_id": "w", "messages": whole[:2] + whole[4:]}  # carries the action whole[4]
    other = example("x", 1)
    records = [first, second, other]
    [twice] = [c for c in evalset.contexts(records, EvalSettings(max_contexts=100)) if c.teacher == whole[4]]
    assert twice.messages == whole[:4]
    loss = EvalSettings(max_examples=3)
    assert len(evalset.loss_records(records, loss)) == 3
    assert evalset.loss_records(records, loss, frozenset({twice.key})) == [other]


def test_a_blind_pair_leaves_the_judges_and_the_next_blind_draw(store, tiny_model, tmp_path):
    model = str(tiny_model)
    folder = built_sft(store, tmp_path, "sft", {"train": [example("s1", 1), example("s2", 0)], "test": HELD},
                       base_model=model)
    base = Target(model)
    first = choose_set(store, base)
    assert first.set_aside == frozenset() and first.sha256 == sha256_file(folder / "test.jsonl")
    row0, report0 = evaluate(store, base, first, SETTINGS)
    drawn0 = {g["key"] for g in generations(row0)}
    assert len(drawn0) == report0.contexts == 10 and report0.examples == 4
    every = {c.key: c for c in evalset.contexts(HELD, SETTINGS.model_copy(update={"max_contexts": 100}))}
    assert len(every) == 12
    k_person, k_teacher, k_better = (next(c for c in every.values() if c.session_id == s and c.key in drawn0)
                                     for s in ("h0", "h1", "h2"))

    _judged(store, model, "person", k_person, "worse")  # a pair, by default in the preference build
    _judged(store, model, "teacher", k_teacher, "worse")  # a pair when asked for: set aside all the same
    _judged(store, model, "person", k_better, "better")  # evidence, no pair: stays in the held-out draws
    assert blind_contexts(store, model) == {k_person.key, k_teacher.key}
    assert blind_contexts(store, "another base model") == frozenset()

    # the refining stage's preference build (its default config) takes the person's pair, counted by source
    assert PairsConfig().blind_judges == ["person"]
    student = Scripted({("s1", 2): "I give up.", ("s1", 4): "Fixed s1.", ("s2", 2): "Fixed s2."})
    out = tmp_path / "prefs"
    man = build(plan(store, PairsConfig(base_model=model, name="prefs")), student, out)
    Registry(store).register(out, manifests.write(out, man))  # a built preference dataset
    out = Path(Registry(store).get("prefs").path)
    report = json.loads((out / manifests.REPORT).read_text())
    assert report["by_source"] == {"student": 1, BLIND: 1} and report["blind_test"]["judges"] == ["person"]
    [pair] = [r for r in manifests.iter_examples(out, "train") if r["source"] == BLIND]
    assert pair["session_id"] == "h0" and pair["turn"] == k_person.turn

    # the judge's held-out set: K set aside, its sha256 another, so the evaluation from before is not reused
    now = choose_set(store, base)
    assert now.name == first.name and now.set_aside == {k_person.key, k_teacher.key}
    assert now.sha256 != first.sha256
    seen: list = []
    row1, report1 = evaluate(store, base, now, SETTINGS, sink=seen.append)
    assert row1.id != row0.id and row1.eval_set_sha256 == report1.eval_set_sha256 == now.sha256
    drawn1 = {g["key"] for g in generations(row1)}
    assert drawn1 == set(every) - {k_person.key, k_teacher.key}  # the counts balance: two others drawn instead
    assert report1.contexts == 10 and report1.reused_contexts == len(drawn0 & drawn1) == 8
    assert report0.set_aside == 0 and report1.set_aside == 2  # the report says what no draw took
    assert {r["session_id"] for r in read_rows(Path(row1.report_path).with_name(LOSSES))} == {"h2", "h3"}
    assert report1.examples == 2  # the examples holding K and K' are no loss examples either
    said = [e.body.message for e in seen if isinstance(e.body, P.Log)]
    assert any("2 held-out context(s) set aside, as blind-test pairs were made of them" in m for m in said), said
    assert evaluate(store, base, choose_set(store, base), SETTINGS)[0].id == row1.id  # now cached by the new set

    # the next blind draw holds neither; it shows fewer than asked when the set holds fewer
    found = answered(base, now, Evaluation(row1, report1))
    picked = draw(found, 20, seed=1, shown={k_better.key})
    assert {c.key for c in picked} == drawn1 and len(picked) == 10
    assert picked[-1].key == k_better.key  # shown before (judged better): still drawn, after the fresh ones
