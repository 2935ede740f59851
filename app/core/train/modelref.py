"""Check a model reference without loading anything: the embedded default, a local folder, or a hub id."""
from __future__ import annotations

import re
from pathlib import Path

from app.core.base.errors import Explained
from app.core.train.spec import DEFAULT_MODEL

EMBEDDED_ALIASES = {DEFAULT_MODEL, "smollm2", "smollm2-135m-instruct", "huggingfacetb/smollm2-135m-instruct"}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin", "*.gguf")


class ModelRefError(Explained, ValueError):
    """A model reference that cannot be used; the message says what, why and what to do."""


def is_embedded(ref: str) -> bool:
    return ref.strip().lower() in EMBEDDED_ALIASES


def check_model_folder(folder: Path) -> None:
    """Raise ModelRefError unless folder looks like a Hugging Face causal-LM folder."""
    if not folder.is_dir():
        raise ModelRefError(f"{folder} is not a folder.")
    if not (folder / "config.json").is_file():
        raise ModelRefError(f"{folder} is not a model folder: it has no config.json. Choose a Hugging Face model "
                            "folder (config.json, *.safetensors, tokenizer files) or use the embedded default.")
    if not any(next(folder.glob(g), None) for g in WEIGHT_GLOBS):
        raise ModelRefError(f"{folder} has a config.json but no weights (*.safetensors or pytorch_model.bin). "
                            "Copy the weights into it or choose another folder.")
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise ModelRefError(f"{folder} has no tokenizer (tokenizer.json / tokenizer_config.json). Save the "
                            "tokenizer next to the model (tokenizer.save_pretrained(folder)).")


def check_model_ref(ref: str) -> str:
    """Return the kind of reference ('embedded' | 'folder' | 'hub'), or raise ModelRefError."""
    ref = (ref or DEFAULT_MODEL).strip()
    if is_embedded(ref):
        return "embedded"
    path = Path(ref).expanduser()
    if path.exists() or ref.startswith(("/", ".", "~")):
        check_model_folder(path)
        return "folder"
    if HUB_ID.match(ref):
        return "hub"
    raise ModelRefError(f"{ref!r} is neither a model folder nor a hub id like 'HuggingFaceTB/SmolLM2-360M-Instruct'.")
