"""Deploy and roll back: only a checkpoint with a passing gate verdict is deployed (the gate runs when it has none);
its export must have passed the smoke test and still hash as exported; the server switches to it while the old model
keeps serving until the new one is loaded. Every change is a deployment row (and a promotion, so the deployed
pointer and the served model agree); rollback serves what the current deployment replaced."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from app.core.base.fingerprint import sha256_file
from app.core.base.schema import Deployment
from app.core.base.store import Store
from app.core.judge import promote as judge_promote
from app.core.judge.records import Target, deployed, passing_verdict, resolve, verdicts_of
from app.core.ship import serving as server
from app.core.ship.config import DEFAULT_QUANT
from app.core.ship.errors import ShipError
from app.core.ship.exports import Export, Sink, export, get


@dataclass
class Deployed:
    row: Deployment
    export: Export
    state: dict | None  # the server's status after the change (None: the server is stopped)


def current(store: Store) -> Deployment | None:
    with store.session() as s:
        return s.scalar(select(Deployment).order_by(Deployment.id.desc()))


def history(store: Store, limit: int = 50) -> list[Deployment]:
    with store.session() as s:
        return list(s.scalars(select(Deployment).order_by(Deployment.id.desc()).limit(limit)))


def served_model(row: Deployment, exp: Export) -> server.Model:
    return server.Model(name=Path(row.file).stem, path=str(exp.folder / row.file), sha256=row.sha256, quant=row.quant)


def gate(store: Store, target: Target, sink: Sink | None, cancel: threading.Event | None) -> int | None:
    """The passing verdict's id (the gate runs when there is none); ShipError with the gate's reasons on a fail."""
    if target.is_base:
        return None
    if (verdict := passing_verdict(store, target.id)) is not None:
        return verdict.id
    if judged := verdicts_of(store, target.id):
        raise ShipError(f"{target.label} failed the quality gate", why="; ".join(json.loads(judged[0].reasons_json)),
                        fix=f"judge it again after changing the thresholds (nightschool promote {target.id}), or "
                            "train another cycle; it can still be exported")
    judgement, promoted = judge_promote.promote(store, str(target.id), sink=sink, cancel=cancel)
    if promoted is None:
        raise ShipError(f"{target.label} did not pass the quality gate", why="; ".join(judgement.verdict.reasons),
                        fix="train another cycle (or adjust the gate's thresholds); it can still be exported")
    return judgement.row.id


def verified(exp: Export, quant: str) -> dict:
    """The export's file for `quant`, smoke-tested and unchanged on disk (a truncated or corrupt file is refused)."""
    entry = exp.file(quant)
    if not entry.get("ok"):
        raise ShipError(f"{entry['file']} failed its smoke test", why=entry.get("why", ""),
                        fix="it can be exported and inspected, but not deployed")
    path = exp.folder / entry["file"]
    if not path.is_file() or sha256_file(path) != entry["sha256"]:
        raise ShipError(f"{entry['file']} changed since it was exported", why="its sha256 differs (corrupt or "
                        "truncated)", fix="export the checkpoint again (nightschool export … --force)")
    return entry


def _serve(model: server.Model, previous: server.Model | None, port: int | None) -> dict:
    if server.state() is None:
        return server.start(model, previous if previous and Path(previous.path).is_file() else None, port)
    return server.switch(model)


def _promotion(store: Store, target: Target, verdict_id: int | None, action: str, note: str) -> None:
    """Keep the judge's deployed pointer on the served checkpoint."""
    now = deployed(store, target.base_model)
    if now is not None and now.checkpoint_id == target.id:
        return
    judge_promote.insert(store, target.base_model, None if target.is_base else target, verdict_id, action,
                         now.id if now else None, note)


def deploy(store: Store, ref: str, quant: str = DEFAULT_QUANT, sink: Sink | None = None,
           cancel: threading.Event | None = None, port: int | None = None) -> Deployed:
    """Gate → export (reused when done) → smoke-tested file → the server serves it → recorded."""
    target = resolve(store, ref)
    verdict_id = gate(store, target, sink, cancel)
    exp = export(store, target, [quant], sink=sink, cancel=cancel)
    entry = verified(exp, quant)
    before = current(store)
    previous = served_model(before, get(store, before.export_id)) if before else None
    row = Deployment(export_id=exp.row.id, file=entry["file"], quant=quant, sha256=entry["sha256"],
                     checkpoint_id=target.id, base_model=target.base_model, action="deploy",
                     replaces_id=before.id if before else None, note=f"deployed {target.label} ({quant})")
    state = _serve(served_model(row, exp), previous, port)
    with store.session() as s:
        s.add(row)
    _promotion(store, target, verdict_id, "deploy", row.note)
    return Deployed(row, exp, state)


def rollback(store: Store, port: int | None = None) -> Deployed:
    """Serve again what the current deployment replaced (instantly when the server still holds it)."""
    now = current(store)
    if now is None or now.replaces_id is None:
        raise ShipError("nothing to roll back", why="no earlier deployment is recorded")
    with store.session() as s:
        before = s.get(Deployment, now.replaces_id)
    exp = get(store, before.export_id)
    model = served_model(before, exp)
    st = server.state()
    if st is not None and (st.get("standby") or {}).get("sha256") == before.sha256:
        state = server.swap_back()
    elif st is not None:
        state = server.switch(model)
    else:
        state = server.start(model, None, port) if server.desired() else None
    row = Deployment(export_id=before.export_id, file=before.file, quant=before.quant, sha256=before.sha256,
                     checkpoint_id=before.checkpoint_id, base_model=before.base_model, action="rollback",
                     replaces_id=before.replaces_id, note=f"rolled back to {exp.row.label} ({before.quant})")
    with store.session() as s:
        s.add(row)
    target = resolve(store, str(before.checkpoint_id)) if before.checkpoint_id else Target(before.base_model)
    verdict = passing_verdict(store, before.checkpoint_id) if before.checkpoint_id else None
    _promotion(store, target, verdict.id if verdict else None, "rollback", row.note)
    return Deployed(row, exp, state)


def ensure_serving(store: Store, port: int | None = None) -> dict | None:
    """After a restart of the app: the server runs again with the current deployment when the user left it on."""
    if (st := server.state()) is not None or not server.desired():
        return st
    now = current(store)
    if now is None:
        return None
    previous = None
    if now.replaces_id is not None:
        with store.session() as s:
            before = s.get(Deployment, now.replaces_id)
        previous = served_model(before, get(store, before.export_id))
    return server.start(served_model(now, get(store, now.export_id)), previous, port)
