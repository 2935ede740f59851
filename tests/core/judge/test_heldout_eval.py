"""Evaluation uses the current held-out set of the base model (the newest build's test split), whatever dataset a
checkpoint trained on; a grown set is evaluated again — only what is new in it is measured, the rest read from the
evaluation before, with the same per-example evidence as measuring it all — and an unchanged one comes from the cache
(set sha256). Real builds with the tiny model's tokenizer, real evaluations with the tiny model."""
from __future__ import annotations

from pathlib import Path

import pytest

from app.core.base.fingerprint import sha256_file
from app.core.datasets import builder, manifest as M
from app.core.datasets.catalog import Registry
from app.core.datasets.config import BuildConfig, Filters
from app.core.judge.evaluate import choose_set, evaluate
from app.core.judge.records import Target, evals_of
from app.core.judge.report import GENERATIONS, LOSSES, EvalSettings, read_rows
from app.core.train.spec import JobSpec, Lineage
from tests.core.datasets.helpers import ingest, write_session

SETTINGS = EvalSettings(max_contexts=4, max_new_tokens=8, samples=1)


def _build(store, renderer, model: str, name: str, share: float, out: Path):
    config = BuildConfig(name=name, base_model=model, max_length=1024, val_share=0.1, test_share=share,
                         filters=Filters(near_duplicate=0.0))
    builder.build(store, config, renderer, out / name)
    return Registry(store).register(out / name, sha256_file(out / name / M.MANIFEST)).dataset


def test_evaluation_follows_the_current_heldout_set(store, tiny_model, tmp_path):
    from engine import render

    renderer, model = render.load(str(tiny_model), tiny_model.parent), str(tiny_model)
    agent = tmp_path / "agent" / "-home-me-proj"
    for i in range(20):  # session ids hash the file's path: 20 at 0.45 leave none held out 1 time in 100 000
        write_session(agent, i)
    ingest(store, agent)
    _build(store, renderer, model, "b0", 0.45, tmp_path / "work")
    base = Target(model)
    first = choose_set(store, base)
    assert first.name == "b0/test"
    row, _ = evaluate(store, base, first, SETTINGS)

    for i in range(20, 40):
        write_session(agent, i)
    ingest(store, agent)
    grown = _build(store, renderer, model, "b1", 0.45, tmp_path / "work")
    assert M.read(Path(grown.path)).heldout_added  # the set grew
    spec = JobSpec(job_id="j", dataset_path="x", dataset_sha256="x", models_dir="m", run_dir="r", socket_path="s",
                   token="t", model=model, lineage=Lineage(dataset_name="b0"))
    now = choose_set(store, Target(model, spec=spec))
    assert now.name == "b1/test" and now.sha256 != first.sha256  # not the set the job trained beside
    assert choose_set(store, base, dataset="b0").name == "b0/test"  # an explicit dataset still wins
    again, grown = evaluate(store, base, now, SETTINGS)
    assert again.id != row.id and again.eval_set_sha256 == now.sha256  # a grown set: the base evaluated again
    before = read_rows(Path(row.report_path).with_name(LOSSES))
    assert 0 < grown.reused_examples == len({r["key"] for r in before} & {r["key"] for r in rows_of(again, LOSSES)})
    assert grown.reused_examples < grown.examples  # the new sessions' examples were measured

    for i in range(40, 44):  # new sessions, none held out: the set (and its file) is the same
        write_session(agent, i)
    ingest(store, agent)
    _build(store, renderer, model, "b2", 0.0, tmp_path / "work")
    same = choose_set(store, base)
    assert same.name == "b2/test" and same.sha256 == now.sha256
    cached, _ = evaluate(store, base, same, SETTINGS)
    assert cached.id == again.id and len(evals_of(store, base)) == 2

    fresh, everything = evaluate(store, base, now, SETTINGS, force=True)  # measured again from scratch
    assert everything.reused_examples == everything.reused_contexts == 0
    assert everything.examples == grown.examples and everything.contexts == grown.contexts
    assert everything.metrics["loss"] == pytest.approx(grown.metrics["loss"], rel=1e-4)
    loss = {r["key"]: r for r in rows_of(fresh, LOSSES)}
    assert [(r["key"], r["tokens"]) for r in rows_of(again, LOSSES)] == [(k, r["tokens"]) for k, r in loss.items()]
    assert all(r["nll"] == pytest.approx(loss[r["key"]]["nll"], rel=1e-4) for r in rows_of(again, LOSSES))
    assert ([(g["key"], g["student"], g["outcome"]) for g in rows_of(again, GENERATIONS)]
            == [(g["key"], g["student"], g["outcome"]) for g in rows_of(fresh, GENERATIONS)])


def rows_of(row, name: str) -> list[dict]:
    return read_rows(Path(row.report_path).with_name(name))
