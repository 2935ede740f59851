"""Deploy and roll back the served model: only a checkpoint with a passing gate verdict is deployed (the gate runs when
it has none); its export must have passed the smoke test and still hash as exported; the server switches to it while
the old model keeps serving until the new one is loaded; rollback serves what the current deployment replaced. What
is deployed is recorded by (and asked of) judge/deployment."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from app.core.base.fingerprint import sha256_file
from app.core.base.schema import Deployment
from app.core.base.store import Store
from app.core.judge import deployment, promote as judge_promote
from app.core.judge.deployment import deployments as history, served as current  # asked there, kept there
from app.core.judge.records import Target, passing_verdict, verdicts_of
from app.core.ship import serving as server
from app.core.ship.config import DEFAULT_QUANT
from app.core.ship.errors import ShipError
from app.core.ship.exports import Export, Sink, export, get

__all__ = ["Deployed", "current", "deploy", "ensure_serving", "gate", "history", "rollback", "served_model",
           "verified"]


@dataclass
class Deployed:
    row: Deployment
    export: Export
    state: dict | None  # the server's status after the change (None: the server is stopped)


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
    judgement, promoted = judge_promote.promote(store, target, sink=sink, cancel=cancel)
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


def deploy(store: Store, target: Target, quant: str = DEFAULT_QUANT, sink: Sink | None = None,
           cancel: threading.Event | None = None, port: int | None = None) -> Deployed:
    """Gate → export (reused when done) → smoke-tested file → the server serves it → recorded."""
    verdict_id = gate(store, target, sink, cancel)
    exp = export(store, target, [quant], sink=sink, cancel=cancel)
    entry = verified(exp, quant)
    before = current(store)
    previous = served_model(before, get(store, before.export_id)) if before else None
    row = deployment.planned(exp.row.id, entry, target, before)
    state = _serve(served_model(row, exp), previous, port)
    deployment.record_deploy(store, row, target, verdict_id)
    return Deployed(row, exp, state)


def rollback(store: Store, port: int | None = None) -> Deployed:
    """Serve again what the current deployment replaced (instantly when the server still holds it)."""
    now = current(store)
    before = deployment.replaced(store, now) if now is not None else None
    if before is None:
        raise ShipError("nothing to roll back", why="no earlier deployment is recorded")
    exp = get(store, before.export_id)
    model = served_model(before, exp)
    st = server.state()
    if st is not None and (st.get("standby") or {}).get("sha256") == before.sha256:
        state = server.swap_back()
    elif st is not None:
        state = server.switch(model)
    else:
        state = server.start(model, None, port) if server.desired() else None
    row = deployment.record_served_rollback(store, before, f"rolled back to {exp.row.label} ({before.quant})")
    return Deployed(row, exp, state)


def ensure_serving(store: Store, port: int | None = None) -> dict | None:
    """After a restart of the app: the server runs again with the current deployment when the user left it on."""
    if (st := server.state()) is not None or not server.desired():
        return st
    now = current(store)
    if now is None:
        return None
    before = deployment.replaced(store, now)
    previous = served_model(before, get(store, before.export_id)) if before is not None else None
    return server.start(served_model(now, get(store, now.export_id)), previous, port)
