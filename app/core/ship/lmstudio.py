"""LM Studio: place a GGUF in its models folder (<root>/nightschool/<name>-GGUF/<name>-<QUANT>.gguf)."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

from app.core.base import files
from app.core.ship.errors import ShipError

PUBLISHER = "nightschool"
MAGIC = b"GGUF"
SPARE = 64 * 1024 * 1024  # left free on the destination disk after a copy
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_QUANT = re.compile(r"[A-Za-z0-9_]+")


def default_root() -> Path:
    """LM Studio's models folder: $LMSTUDIO_MODELS, else ~/.lmstudio/models when ~/.lmstudio exists (LM Studio
    0.3+), else the older ~/.cache/lm-studio/models."""
    if os.environ.get("LMSTUDIO_MODELS"):
        return Path(os.environ["LMSTUDIO_MODELS"]).expanduser()
    home = Path.home()
    return home / ".lmstudio" / "models" if (home / ".lmstudio").exists() else home / ".cache" / "lm-studio" / "models"


def _check_gguf(gguf: Path) -> None:
    try:
        with gguf.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ShipError(f"The GGUF file {gguf} cannot be read", str(exc), "Export the model to GGUF first") from exc
    if magic != MAGIC:
        raise ShipError(f"{gguf} is not a GGUF file", f"it starts with {magic!r}, not {MAGIC!r}",
                        "Export the model to GGUF first and pass that file")


def _quant(gguf: Path, quant: str | None) -> str:
    """The quantisation label: given, else the last dot part of the file name (model.Q4_K_M.gguf -> Q4_K_M)."""
    stem = gguf.name[:-5] if gguf.name.lower().endswith(".gguf") else gguf.stem
    label = quant or (stem.rsplit(".", 1)[1] if "." in stem else "")
    if not _QUANT.fullmatch(label):
        raise ShipError(f"No quantisation label for {gguf.name}",
                        "LM Studio files are named <model>-<QUANT>.gguf and the file name does not carry one "
                        "(model.Q4_K_M.gguf)", "Pass quant= (e.g. Q8_0) or name the file model.<QUANT>.gguf")
    return label.upper()


def destination(gguf: Path, name: str, root: Path | None = None, quant: str | None = None) -> Path:
    """Where LM Studio expects the file: <root>/nightschool/<name>-GGUF/<name>-<QUANT>.gguf."""
    if not _NAME.fullmatch(name or "") or ".." in name:
        raise ShipError(f"{name!r} cannot name an LM Studio model folder",
                        "names use letters, digits and - _ . (no slashes)", "Choose a name like nightschool-smol")
    folder = Path(root) if root is not None else default_root()
    return folder / PUBLISHER / f"{name}-GGUF" / f"{name}-{_quant(Path(gguf), quant)}.gguf"


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _same(a: Path, b: Path) -> bool:
    if not b.is_file():
        return False
    if os.path.samefile(a, b):
        return True
    return a.stat().st_size == b.stat().st_size and _digest(a) == _digest(b)


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _check_space(gguf: Path, dest: Path) -> None:
    need = gguf.stat().st_size + SPARE
    free = shutil.disk_usage(_existing(dest.parent)).free
    if free < need:
        raise ShipError(f"Not enough disk space to copy the model into LM Studio's folder ({dest.parent})",
                        f"it needs {_gib(need)} (the model plus a margin) and {_gib(free)} is free",
                        f"Free at least {_gib(need - free)} there, or set LMSTUDIO_MODELS to a folder on a disk "
                        "with room")


def _link(gguf: Path, tmp: Path) -> bool:
    """A hard link (no copy, no space); False when the filesystem has none (FAT, some network shares)."""
    try:
        os.link(gguf, tmp)
        return True
    except OSError:
        return False


def export(gguf: Path, name: str, root: Path | None = None, quant: str | None = None) -> Path:
    """Put `gguf` where LM Studio lists it (hard link on the same filesystem, else a copy through a .part file);
    returns the path. The same content already there is left as it is; a different file under that name is
    replaced."""
    gguf = Path(gguf)
    _check_gguf(gguf)
    dest = destination(gguf, name, root, quant)
    if _same(gguf, dest):
        return dest
    same_fs = os.stat(gguf).st_dev == os.stat(_existing(dest.parent)).st_dev
    if not same_fs:
        _check_space(gguf, dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    tmp.unlink(missing_ok=True)
    try:
        if not (same_fs and _link(gguf, tmp)):
            if same_fs:
                _check_space(gguf, dest)
            shutil.copyfile(gguf, tmp)
        files.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest
