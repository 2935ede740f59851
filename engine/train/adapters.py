"""How a job's model is made trainable: LoRA (PEFT), QLoRA (4-bit base via bitsandbytes, CUDA only) or full
fine-tuning, optionally starting from an adapter a previous job trained."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from app.core.train.spec import JobSpec
from engine import loading
from engine.errors import EngineError


def method_problems(method: str) -> list[str]:
    """Why `method` cannot run on this machine (empty when it can)."""
    if method != "qlora":
        return []
    import torch

    problems = []
    if not torch.cuda.is_available():
        problems.append("QLoRA needs an NVIDIA GPU with CUDA (bitsandbytes 4-bit kernels); this machine has none. "
                        "Use method `lora` (same adapter, full-precision base) or run the job on a CUDA machine")
    if importlib.util.find_spec("bitsandbytes") is None:
        problems.append("QLoRA needs the bitsandbytes package: pip install bitsandbytes (on the CUDA machine)")
    return problems


def lora_config(spec: JobSpec):
    from peft import LoraConfig

    h = spec.hyper
    return LoraConfig(r=h.lora_r, lora_alpha=h.lora_alpha, lora_dropout=h.lora_dropout,
                      target_modules="all-linear", task_type="CAUSAL_LM")


def _quantization():
    import torch
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch.bfloat16)


def load_tokenizer(spec: JobSpec, report=loading._quiet):
    """(tokenizer, label) without the weights (dry runs)."""
    from transformers import AutoTokenizer

    source, label = loading.resolve(spec.model, Path(spec.models_dir), report)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except Exception as exc:
        raise EngineError("the model's tokenizer could not be loaded", why=f"{type(exc).__name__}: {exc}",
                          fix="choose a complete Hugging Face model folder") from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, label


def load(spec: JobSpec, report=loading._quiet):
    """(model, tokenizer, label, peft_config or None) ready for a TRL trainer."""
    method = spec.hyper.method
    if problems := method_problems(method):
        raise EngineError(f"{method} cannot run here", why=problems[0], fix="change the job's method to lora")
    quant = _quantization() if method == "qlora" else None
    start = spec.init_adapter if loading.is_full_model(spec.init_adapter) else None  # a full fine-tune goes on
    if start and method != "full":  # an adapter on it would be judged and shipped on the base, without it
        raise EngineError("a LoRA job cannot continue a fully fine-tuned model",
                          why=f"{start} is a whole model, and an adapter is always put on the base model",
                          fix="train it with the full recipe, or start the LoRA job from the base model")
    model, tokenizer, label = loading.load_for_training(start or spec.model, Path(spec.models_dir), report, quant)
    label = loading.resolve(spec.model, Path(spec.models_dir))[1] if start else label
    if quant is not None:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model)
    if spec.init_adapter and not start:
        return _with_adapter(model, spec.init_adapter), tokenizer, label, None
    return model, tokenizer, label, (None if method == "full" else lora_config(spec))


def _with_adapter(model, adapter: str):
    """Continue training an adapter from an earlier job (e.g. preference training after SFT)."""
    from peft import PeftModel

    if not (Path(adapter) / "adapter_config.json").is_file():
        raise EngineError("the starting adapter is not a LoRA adapter folder",
                          why=f"{adapter} has no adapter_config.json", fix="pick a finished job's adapter")
    return PeftModel.from_pretrained(model, adapter, is_trainable=True)
