"""What earlier datasets hold, read for the sessions a build read only: `used` and `prior_splits` with ids give the
full reads' answers for those ids, across several IN slices, with a session in many datasets (train/val over test,
the newest winning) and one in none."""
from __future__ import annotations

import random

from sqlalchemy import insert

from app.core.base.schema import BuiltDataset, DatasetSession
from app.core.datasets import catalog
from app.core.datasets.catalog import Registry


def test_reads_for_some_sessions_answer_as_the_full_reads_do(store, monkeypatch):
    rng = random.Random(7)
    sessions = [f"s{i:03d}" for i in range(60)]
    with store.engine.begin() as conn:
        for d in range(4):
            ds = conn.execute(insert(BuiltDataset).values(
                name=f"ds{d}", kind="sft", base_model="m", fingerprint=f"f{d}", spec_id="chat_sft_v1",
                template_sha256="0" * 64, path=f"/nowhere/ds{d}", mode="full", manifest_json="{}")).inserted_primary_key[0]
            conn.execute(insert(DatasetSession), [
                dict(dataset_id=ds, session_id=sid, split=rng.choice(["train", "val", "test"]), examples=1,
                     content_sha256=f"{sid}-{d % 2}") for sid in sessions if rng.random() < 0.7])
    registry = Registry(store)
    monkeypatch.setattr(catalog, "IDS_PER_QUERY", 7)  # several slices
    some = set(rng.sample(sessions, 25)) | {"never-in-a-dataset"}
    for learned in (None, ["ds1", "ds3"]):
        full = registry.used("m", learned)
        assert registry.used("m", learned, ids=some) == {p for p in full if p[0] in some} != set()
    prior = registry.prior_splits("m")
    assert registry.prior_splits("m", ids=some) == {k: v for k, v in prior.items() if k in some}
    assert {"train", "val", "test"} <= set(prior.values())
    monkeypatch.setattr(catalog, "FEW_IDS", 10)  # too many to probe: one read of every row, then the same answer
    assert registry.used("m", None, ids=some) == registry.used("m", None)
