"""Exports: run the engine's export worker for a checkpoint (or the base model), record what it made, reuse an export
with the same checkpoint and quantizations instead of redoing it."""
from __future__ import annotations

import json
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sqlalchemy import select

from app.core.base import paths, protocol as P
from app.core.base.schema import ExportRow
from app.core.base.store import Store
from app.core.judge.records import Target, stem_of  # noqa: F401  (stem_of: the Ship tab names files)
from app.core.ship.config import QUANTS, ExportConfig
from app.core.ship.errors import ShipError
from app.core.workers import WorkerRun

Sink = Callable[[P.Envelope], None]


def exports_dir() -> Path:
    path = paths.data_dir() / "exports"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Export:
    """A recorded export with its files (each: quant, file, sha256, size, smoke results) and template facts."""

    row: ExportRow

    @property
    def folder(self) -> Path:
        return Path(self.row.path)

    @property
    def files(self) -> list[dict]:
        return json.loads(self.row.files_json)

    @property
    def meta(self) -> dict:
        return json.loads(self.row.meta_json)

    def file(self, quant: str | None = None) -> dict:
        """The entry of one quantization (the first exported when None)."""
        for entry in self.files:
            if quant is None or entry["quant"] == quant:
                return entry
        raise ShipError(f"export #{self.row.id} has no {quant} file",
                        fix=f"export again with --quant {quant}")

    def path(self, quant: str | None = None) -> Path:
        return self.folder / self.file(quant)["file"]


def file_stem(target: Target) -> str:
    return target.file_stem


def config_for(target: Target, quants: list[str] | None = None, lora: bool = True) -> ExportConfig:
    quants = list(dict.fromkeys(quants or ["q4_k_m"]))
    if unknown := [q for q in quants if q not in QUANTS]:
        raise ShipError(f"unknown quantization {', '.join(unknown)}", fix=f"choose from {', '.join(QUANTS)}")
    return ExportConfig(label=target.label, name=file_stem(target), base_model=target.base_model,
                        adapter=target.adapter, adapter_sha256=target.adapter_sha256(), quants=quants,
                        lora=lora and target.adapter is not None)


def cached(store: Store, key: str) -> Export | None:
    """The newest export with this key whose files are all still on disk."""
    with store.session() as s:
        rows = list(s.scalars(select(ExportRow).where(ExportRow.key == key).order_by(ExportRow.id.desc())))
    for row in rows:
        exp = Export(row)
        if all((exp.folder / f["file"]).is_file() for f in exp.files):
            return exp
    return None


def get(store: Store, export_id: int) -> Export:
    with store.session() as s:
        row = s.get(ExportRow, export_id)
    if row is None:
        raise ShipError(f"there is no export #{export_id}", fix="see `nightschool exports`")
    return Export(row)


def history(store: Store, limit: int = 50) -> list[Export]:
    with store.session() as s:
        return [Export(r) for r in s.scalars(select(ExportRow).order_by(ExportRow.id.desc()).limit(limit))]


def export(store: Store, target: Target, quants: list[str] | None = None, lora: bool = True,
           sink: Sink | None = None, cancel: threading.Event | None = None, force: bool = False) -> Export:
    """The target as GGUF (merged + quantized + LoRA GGUF, each smoke-tested); reused when already exported."""
    config = config_for(target, quants, lora)
    if not force and (hit := cached(store, config.key())) is not None:
        if sink is not None:
            sink(P.make(P.Log(message=f"reusing export #{hit.row.id} of {target.label}")))
        return hit
    work = WorkerRun(store, "engine.workers.export", {"config": config.model_dump()})
    try:
        code = work.stream(sink, cancel)
        if code is None:
            raise ShipError(f"the export of {target.label} was cancelled", why="nothing was kept")
        made = work.result(P.Exported)
        if made is None:
            raise ShipError(f"exporting {target.label} failed", why=work.failure(code))
        return _record(store, target, config, made)
    finally:
        work.close()


def _record(store: Store, target: Target, config: ExportConfig, done: P.Exported) -> Export:
    meta = {"stop": done.stop, "eos_token": done.eos_token, "bos_token": done.bos_token, "template": done.template,
            "quants": config.quants}
    with store.session() as s:
        row = ExportRow(checkpoint_id=target.id, base_model=target.base_model, label=target.label, key=config.key(),
                        path="", files_json=json.dumps(done.files), lora_file=done.lora_file,
                        template_sha256=done.template_sha256, meta_json=json.dumps(meta))
        s.add(row)
        s.flush()
        folder = exports_dir() / f"export-{row.id}"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.move(done.path, folder)
        row.path = str(folder)
    return Export(row)
