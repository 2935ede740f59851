"""A checkpoint's lineage: its run and job (recipe, config fingerprint, code hash), the dataset it trained on (name,
fingerprint, the sessions it came from), its parent checkpoint, and its evals, verdicts and promotions."""
from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select

from app.core.base.schema import BuiltDataset, CheckpointRow, Run
from app.core.base.store import Store
from app.core.datasets.catalog import Registry
from app.core.judge.deployment import promotions
from app.core.judge.records import Target, evals_of, verdicts_of


def _dataset(store: Store, target: Target) -> BuiltDataset | None:
    reg = Registry(store)
    lin = target.spec.lineage
    if lin.dataset_name and (ds := reg.get(lin.dataset_name)) is not None:
        return ds
    found = [d for d in reg.all() if d.fingerprint == lin.dataset_fingerprint]
    return found[0] if found else reg.of_file(target.job.dataset_path)


def _parent(store: Store, init_adapter: str | None) -> dict | None:
    if not init_adapter:
        return None
    path = str(Path(init_adapter).expanduser().resolve())
    with store.session() as s:
        row = s.scalar(select(CheckpointRow).where(CheckpointRow.path.in_([init_adapter, path])))
        job_id = s.get(Run, row.run_id).job_id if row else None
    return {"adapter": init_adapter, "checkpoint_id": row.id if row else None, "job": job_id}


def lineage(store: Store, target: Target) -> dict:
    if target.is_base:
        return {"checkpoint": None, "base_model": target.base_model}
    ck, job, spec = target.checkpoint, target.job, target.spec
    with store.session() as s:
        run = s.get(Run, ck.run_id)
    ds = _dataset(store, target)
    dataset = {"file": job.dataset_path, "sha256": job.dataset_sha256,
               "fingerprint": spec.lineage.dataset_fingerprint}
    if ds is not None:
        sessions = Registry(store).sessions_of(ds.id)
        dataset.update(name=ds.name, fingerprint=ds.fingerprint, kind=ds.kind, path=ds.path, examples=ds.examples,
                       sessions=[{"id": u.session_id, "split": u.split, "examples": u.examples} for u in sessions])
    deployed_ids = [p.checkpoint_id for p in promotions(store, target.base_model)[:1]]
    return {
        "checkpoint": {"id": ck.id, "label": target.label, "step": ck.step, "kind": ck.kind, "path": ck.path,
                       "sha256": target.adapter_sha256(), "registered_at": ck.created_at.isoformat()},
        "run": {"id": run.id, "state": run.state, "started_at": run.started_at.isoformat(),
                "ended_at": run.ended_at.isoformat() if run.ended_at else None, "resumed_from": run.resume_step},
        "job": {"id": job.id, "recipe": spec.kind, "state": job.state, "base_model": spec.model,
                "config_fingerprint": spec.lineage.config_fingerprint, "code_hash": spec.lineage.code_hash,
                "hyper": spec.hyper.model_dump(), "hypothesis": spec.lineage.hypothesis},
        "dataset": dataset,
        "parent": _parent(store, spec.init_adapter),
        "evals": [{"id": e.id, "eval_set": e.eval_set, "metrics": json.loads(e.metrics_json)}
                  for e in evals_of(store, target)],
        "verdicts": [{"id": v.id, "verdict": v.verdict, "reasons": json.loads(v.reasons_json),
                      "at": v.created_at.isoformat()} for v in verdicts_of(store, ck.id)],
        "deployed": bool(deployed_ids and deployed_ids[0] == ck.id),
    }
