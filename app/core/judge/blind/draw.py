"""Which model a blind test is about and what it shows: the student's answers read from its evaluation with the served
decoding (llama.cpp, the lazy tool grammar; the evaluate module's cache, so a cycle's judging is reused, else run now
with progress), each matched by key to its held-out context, and N of them drawn across sessions as the judge draws
(evalset.stratified), next actions not yet shown to this judge first; a context a blind-test pair was made of is set
aside, as the judge sets it aside (evaluate.choose_set): no later test shows it."""
from __future__ import annotations

import threading
from dataclasses import dataclass

from app.core.base.schema import EvalRow
from app.core.base.store import Store
from app.core.datasets.contexts import Context
from app.core.judge.blind.render import BlindError, context
from app.core.judge.deployment import deployed_target
from app.core.judge.evalset import EvalSet, contexts, read_records, stratified
from app.core.judge.evaluate import Evaluation, Sink, choose_set, evaluate_all, generations
from app.core.judge.records import JudgeError, Target, resolve
from app.core.judge.report import EvalSettings


def served(settings: EvalSettings) -> EvalSettings:
    """`settings` with the served decoding: llama.cpp on the model's GGUF, tool calls under the lazy tool grammar."""
    return settings.model_copy(update={"evaluator": "llama.cpp", "grammar": True})


def model(store: Store, ref: str | None, base_model: str) -> Target:
    """What a person names ('#12', a job id, 'base', 'base:MODEL': records.resolve), or with no name the deployed
    student of `base_model` (the base model itself while nothing is promoted)."""
    try:
        if ref:
            return resolve(store, ref, base_model)
        return deployed_target(store, base_model) or Target(base_model)
    except BlindError:
        raise
    except JudgeError as exc:
        raise BlindError(f"no blind test of {ref or 'the deployed student'}: {exc.message}", why=exc.why,
                         fix=exc.fix) from None


def name(target: Target) -> str:
    """The model in a sentence: "the base model M" or "checkpoint #12 job-… final"."""
    return f"the base model {target.base_model}" if target.is_base else f"checkpoint {target.label}"


@dataclass
class Answers:
    """The student's answers a blind test draws from: its evaluation (row), the held-out set, each answer's
    generations.jsonl row and held-out context by key."""

    target: Target
    evset: EvalSet
    row: EvalRow
    rows: dict[str, dict]
    contexts: dict[str, Context]
    reused: bool = False


def answers(store: Store, target: Target, settings: EvalSettings, sink: Sink | None = None,
            cancel: threading.Event | None = None) -> Answers:
    """The target's answers on its held-out set with the served decoding: a cached evaluation when there is one, else
    one run now (`sink` gets its progress); an evaluation whose answers file is gone is run again."""
    try:
        evset = choose_set(store, target)
    except JudgeError:
        raise BlindError(f"{name(target)} has no held-out set to draw a blind test from",
                         why="no built dataset of this base model has a test split"
                             + ("" if target.is_base else ", and its job had no eval file"),
                         fix="build a dataset with a test share above 0 (nightschool dataset build): a blind test "
                             "shows only sessions no training saw") from None
    done = evaluate_all(store, [target], evset, served(settings), sink, cancel=cancel)[0]
    if not generations(done.row):  # the evaluation's generations.jsonl is gone: its answers are measured again
        done = evaluate_all(store, [target], evset, served(settings), sink, force=True, cancel=cancel)[0]
    return answered(target, evset, done)


def answered(target: Target, evset: EvalSet, done: Evaluation) -> Answers:
    """The answers of `done`, an evaluation of `target` on `evset`, each with its held-out context as that
    evaluation drew them (its settings; the contexts `evset` sets aside left out: blind-test pairs were made of
    them)."""
    rows = {r["key"]: r for r in generations(done.row)}
    records = list(read_records(evset.path))
    found = {c.key: c for c in contexts(records, done.report.settings, evset.set_aside)}
    return Answers(target, evset, done.row, rows, found, done.reused)


def showable(ctx: Context) -> bool:
    try:
        context(ctx.messages)
    except BlindError:
        return False
    return True


def draw(found: Answers, n: int, seed: int, shown: set[str] | frozenset[str] = frozenset()) -> list[Context]:
    """Up to `n` held-out contexts with an answer, drawn round-robin across sessions (near-identical ones once) with
    `seed`, those whose key is not in `shown` first (fewer when the set holds fewer: those set aside are not in
    `found`); BlindError when none has a context a person can read."""
    usable = [ctx for key, ctx in found.contexts.items() if key in found.rows]
    if not usable:
        raise BlindError(f"the evaluation #{found.row.id} of {found.target.label} answered no context of its "
                         "held-out set", why=f"none of its {len(found.rows)} answers matches a next action of "
                                             f"{found.evset.name}",
                         fix="evaluate the model again (nightschool eval REF --force), then start the blind test")
    readable = [ctx for ctx in usable if showable(ctx)]
    if not readable:
        many = f"{len(usable)} next action{'s' if len(usable) != 1 else ''}"
        raise BlindError(f"every held-out context of {found.evset.name} is empty ({many})",
                         why="no message before those next actions has any text or tool call",
                         fix="build the held-out set again from sessions with content (nightschool dataset build)")
    fresh = [c for c in readable if c.key not in shown]
    picked = stratified(fresh, n, seed)
    if len(picked) < n:  # every fresh one is in: the rest from those shown before
        picked += stratified([c for c in readable if c.key in shown], n - len(picked), seed)
    return picked
