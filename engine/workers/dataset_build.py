"""Dataset worker: `python -m engine.workers.dataset_build --spec FILE` builds one SFT dataset into a folder and prints
protocol envelopes (progress, log, built, error), one JSON line each, on stdout. The caller registers the result."""
from __future__ import annotations

import sys
from pathlib import Path

from app.core.base import protocol as P
from app.core.base.fingerprint import sha256_file
from app.core.base.store import Store
from app.core.datasets.builder import build
from app.core.datasets.config import BuildConfig
from engine.workers.envelope import Emitter, worker_main


def run(spec: dict, out: Emitter) -> int:
    from engine import render

    config = BuildConfig.model_validate(spec["config"])
    out.emit(P.Log(message=f"loading the tokenizer of {config.base_model}"))
    renderer = render.load(config.base_model, spec["models_dir"],
                           lambda msg, step, total: out.emit(P.Log(message=msg)))
    out.emit(P.Log(message=f"chat template {renderer.template_sha256[:12]} ({renderer.convention})"))
    store = Store(spec["db"])  # a SQLite file or a PostgreSQL URL
    try:
        folder = Path(spec["out"])
        man = build(store, config, renderer, folder, out.progress)
    finally:
        store.close()
    out.emit(P.Built(name=man.name, path=str(folder), manifest_sha256=sha256_file(folder / "manifest.json"),
                     fingerprint=man.fingerprint, examples=man.examples))
    return 0


def main(argv: list[str] | None = None) -> int:
    return worker_main(argv, "engine.workers.dataset_build", "one dataset", run)


if __name__ == "__main__":
    sys.exit(main())
