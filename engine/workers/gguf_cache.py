"""The f16 GGUFs of judged models, kept so that a model is merged and converted once: by its first llama.cpp evaluation,
then reused by its next evaluations (a new held-out set) and by its export (quantized from the same file)."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from app.core.base import paths

STALE_S = 3600  # a scratch folder this old belongs to a conversion that died
KEEP = 4  # newest files kept (a SmolLM2-135M f16 GGUF is ~270 MB): the base, the deployed model and two candidates
TEMPLATE_CODE = Path(__file__).resolve().parents[2] / "app" / "core" / "ship" / "template.py"


def _stat_print(h, root: Path) -> None:
    """Every file's relative name, size and mtime: sealed checkpoints and model folders do not change in place."""
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for f in files:
        st = f.stat()
        h.update(f"{f.relative_to(root) if f != root else f.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())


def key(base_dir: str | Path, adapter: str | Path | None, name: str, converter: Path) -> str:
    """What decides the file's bytes: the base model, the adapter, the embedded name, the converter and the shipping
    template's code."""
    h = hashlib.sha256(f"{name}\0{converter}\0".encode())
    _stat_print(h, Path(base_dir))
    if adapter:
        _stat_print(h, Path(adapter))
    for code in (converter, TEMPLATE_CODE):
        if code.is_file():
            h.update(hashlib.sha256(code.read_bytes()).digest())
    return h.hexdigest()[:32]


def get(digest: str) -> Path | None:
    """The cached file (its mtime touched: the newest are kept), or None."""
    path = paths.gguf_cache_dir() / f"{digest}.f16.gguf"
    if not path.is_file():
        return None
    os.utime(path)
    return path


def put(digest: str, make: Callable[[Path], Path]) -> Path:
    """`make(folder)` converts into a scratch folder; its file is moved into the cache atomically, then the cache is
    pruned to the KEEP newest."""
    home = paths.gguf_cache_dir()
    home.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=home))
    try:
        made = make(scratch)
        final = home / f"{digest}.f16.gguf"
        os.replace(made, final)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    prune()
    return final


def prune(keep: int = KEEP) -> list[Path]:
    """The oldest files beyond `keep` removed (scratch folders of conversions that died, too); what was removed."""
    home = paths.gguf_cache_dir()
    if not home.is_dir():
        return []
    files = sorted(home.glob("*.f16.gguf"), key=lambda p: p.stat().st_mtime, reverse=True)
    gone = files[keep:]
    for path in gone:
        path.unlink(missing_ok=True)
    for scratch in home.glob(".*"):
        if scratch.is_dir() and time.time() - scratch.stat().st_mtime > STALE_S:
            shutil.rmtree(scratch, ignore_errors=True)
    return gone
