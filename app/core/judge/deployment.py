"""What is deployed, in one home. Promotions (per base model: the deployed checkpoint, or the base model; mirrored to
`deployed.json` for whatever serves it) and deployments (the exported file the built-in server serves) are written
here and only here, together, so they agree: promote, deploy and both rollbacks record through this module, and
everyone else asks it what is deployed, what is served and what a rollback returns to."""
from __future__ import annotations

import json

from sqlalchemy import select

from app.core.base import paths
from app.core.base.files import atomic_write
from app.core.base.schema import Deployment, Promotion, VerdictRow
from app.core.base.store import Store
from app.core.judge.records import JudgeError, Target, by_id, passing_verdict


# --- asking ---------------------------------------------------------------------------------------------------------

def deployed(store: Store, base_model: str) -> Promotion | None:
    """The newest promotion row of a base model (checkpoint_id None: the base model itself); None: never promoted."""
    with store.session() as s:
        return s.scalar(select(Promotion).where(Promotion.base_model == base_model).order_by(Promotion.id.desc()))


def deployed_target(store: Store, base_model: str) -> Target | None:
    """The deployed checkpoint of a base model as a Target; None when the base model itself is what is deployed."""
    row = deployed(store, base_model)
    if row is None or row.checkpoint_id is None:
        return None
    return by_id(store, row.checkpoint_id)


def summary(store: Store, base_model: str) -> dict:
    """The deployed student of a base model as people read it: the model, the checkpoint (None: the base model),
    since when, how it got there and the verdict that let it (its outcome and reasons)."""
    row = deployed(store, base_model)
    out = {"model": base_model, "checkpoint_id": None, "since": None, "action": None, "verdict": None}
    if row is None:
        return out
    out.update(checkpoint_id=row.checkpoint_id, since=row.created_at.isoformat() if row.created_at else None,
               action=row.action)
    if row.verdict_id is not None:
        with store.session() as s:
            verdict = s.get(VerdictRow, row.verdict_id)
        if verdict is not None:
            out["verdict"] = {"id": verdict.id, "verdict": verdict.verdict,
                              "reasons": json.loads(verdict.reasons_json or "[]"),
                              "at": verdict.created_at.isoformat() if verdict.created_at else None}
    return out


def promotions(store: Store, base_model: str | None = None) -> list[Promotion]:
    """Every change of what is deployed (of one base model, or of all), newest first."""
    with store.session() as s:
        q = select(Promotion)
        if base_model is not None:
            q = q.where(Promotion.base_model == base_model)
        return list(s.scalars(q.order_by(Promotion.id.desc())))


def served(store: Store) -> Deployment | None:
    """The deployment the built-in server serves (the newest row); None: nothing was ever deployed."""
    with store.session() as s:
        return s.scalar(select(Deployment).order_by(Deployment.id.desc()))


def deployments(store: Store, limit: int = 50) -> list[Deployment]:
    with store.session() as s:
        return list(s.scalars(select(Deployment).order_by(Deployment.id.desc()).limit(limit)))


def replaced(store: Store, row: Deployment) -> Deployment | None:
    """The deployment `row` replaced (what rolling it back serves again)."""
    if row.replaces_id is None:
        return None
    with store.session() as s:
        return s.get(Deployment, row.replaces_id)


# --- recording ------------------------------------------------------------------------------------------------------

def _write_pointer(base_model: str, target: Target | None, promotion: Promotion) -> None:
    """`deployed.json`: base model → the adapter that is deployed (atomic: temp file + rename)."""
    path = paths.data_dir() / "deployed.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    data[base_model] = {"checkpoint_id": target.id if target else None, "adapter": target.adapter if target else None,
                        "promotion_id": promotion.id, "action": promotion.action}
    atomic_write(path, json.dumps(data, indent=1))


def _insert(store: Store, base_model: str, target: Target | None, verdict_id: int | None, action: str,
            replaces_id: int | None, note: str) -> Promotion:
    """A promotion row (promote / rollback / deploy) and the pointer file."""
    with store.session() as s:
        row = Promotion(base_model=base_model, checkpoint_id=target.id if target else None, verdict_id=verdict_id,
                        action=action, replaces_id=replaces_id, note=note)
        s.add(row)
    _write_pointer(base_model, target, row)
    return row


def promote(store: Store, target: Target, verdict_id: int, note: str) -> Promotion:
    """A checkpoint that passed the gate becomes the deployed one of its base model (already so: that row)."""
    current = deployed(store, target.base_model)
    if current is not None and current.checkpoint_id == target.id:
        return current
    return _insert(store, target.base_model, target, verdict_id, "promote", current.id if current else None, note)


def rollback(store: Store, base_model: str) -> Promotion:
    """Deploy again what the current promotion replaced (or the base model); repeated, it keeps going back."""
    current = deployed(store, base_model)
    if current is None or (current.checkpoint_id is None and current.replaces_id is None):
        raise JudgeError(f"nothing to roll back for {base_model}", why="the base model is what is deployed")
    with store.session() as s:
        before = s.get(Promotion, current.replaces_id) if current.replaces_id else None
    if before is None or before.checkpoint_id is None:
        return _insert(store, base_model, None, None, "rollback", before.replaces_id if before else None,
                       f"rolled back from #{current.checkpoint_id} to the base model")
    target = by_id(store, before.checkpoint_id)
    return _insert(store, base_model, target, before.verdict_id, "rollback", before.replaces_id,
                   f"rolled back from #{current.checkpoint_id} to #{target.id}")


def _follow(store: Store, target: Target, verdict_id: int | None, action: str, note: str) -> None:
    """The deployed pointer follows what the server now serves."""
    now = deployed(store, target.base_model)
    if now is not None and now.checkpoint_id == target.id:
        return
    _insert(store, target.base_model, None if target.is_base else target, verdict_id, action,
            now.id if now else None, note)


def planned(export_id: int, entry: dict, target: Target, replaces: Deployment | None) -> Deployment:
    """The row a deployment of an export's file (`entry`: file, quant, sha256) will record once it serves."""
    return Deployment(export_id=export_id, file=entry["file"], quant=entry["quant"], sha256=entry["sha256"],
                      checkpoint_id=target.id, base_model=target.base_model, action="deploy",
                      replaces_id=replaces.id if replaces else None,
                      note=f"deployed {target.label} ({entry['quant']})")


def record_deploy(store: Store, row: Deployment, target: Target, verdict_id: int | None) -> None:
    """The server now serves `row` (a new deployment of `target`, made by `planned`)."""
    with store.session() as s:
        s.add(row)
    _follow(store, target, verdict_id, "deploy", row.note)


def record_served_rollback(store: Store, before: Deployment, note: str) -> Deployment:
    """The server serves `before` again: a rollback row, and the deployed pointer follows it."""
    row = Deployment(export_id=before.export_id, file=before.file, quant=before.quant, sha256=before.sha256,
                     checkpoint_id=before.checkpoint_id, base_model=before.base_model, action="rollback",
                     replaces_id=before.replaces_id, note=note)
    with store.session() as s:
        s.add(row)
    target = by_id(store, before.checkpoint_id) if before.checkpoint_id else Target(before.base_model)
    verdict = passing_verdict(store, before.checkpoint_id) if before.checkpoint_id else None
    _follow(store, target, verdict.id if verdict else None, "rollback", row.note)
    return row
