"""The export worker (`python -m engine.workers.export --spec FILE`): merge the LoRA into its base (the adapter stays where it
is), save HF safetensors with the shipping chat template, convert to GGUF with llama.cpp's converter, quantize with
llama.cpp's quantizer, convert the adapter alone to a LoRA GGUF, check that the embedded template renders a tool-call
conversation exactly as training did, and smoke-test every file. Envelopes on stdout; `exported` at the end."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

from app.core.base import protocol as P
from app.core.ship import template as ship_template
from app.core.ship.config import STAGE_CONVERT, STAGE_LORA, STAGE_MERGE, STAGE_QUANTIZE, STAGE_SMOKE, ExportConfig
from app.core.ship.errors import ShipError
from engine.workers import llama_tools
from engine.workers import smoke
from engine.workers.envelope import Emitter, worker_main


def merged(config: ExportConfig, models_dir: Path, hf_dir: Path, out: Emitter):
    """Base (+ adapter, merged) saved as safetensors with the export template; returns the tokenizer."""
    from engine import loading

    out.progress(STAGE_MERGE, 0, 3)
    model, tok, _ = loading.load_trained(config.base_model, models_dir, config.adapter,
                                         lambda msg, step, total: out.emit(P.Log(message=msg)))
    out.progress(STAGE_MERGE, 1, 3)
    if config.adapter and not loading.is_full_model(config.adapter):  # a full fine-tune is the model already
        out.emit(P.Log(message=f"merging the adapter {config.adapter} (the adapter itself is kept)"))
        model = model.merge_and_unload()
    out.progress(STAGE_MERGE, 2, 3)
    _export_template(tok, config)
    model.save_pretrained(hf_dir, safe_serialization=True)
    tok.save_pretrained(hf_dir)
    out.progress(STAGE_MERGE, 3, 3)
    return tok


def _export_template(tok, config: ExportConfig) -> None:
    if not tok.chat_template:
        raise ShipError(f"{config.base_model} has no chat template",
                        why="a GGUF without one makes every runtime guess the format (and the model ramble)",
                        fix="choose a base model with a chat template")
    tok.chat_template = ship_template.export_template(tok.chat_template)


def _f16(config: ExportConfig, models_dir: Path, folder: Path, log: Path, out: Emitter) -> tuple[Path, object, bool]:
    """(the f16 GGUF, the tokenizer with the export template, whether the file is the cache's): the file a llama.cpp
    evaluation of the same model converted when there is one (no second merge and conversion), else merged and
    converted here."""
    from engine import loading
    from engine.workers import gguf_cache

    base_dir = loading.resolve(config.base_model, models_dir)[0]
    cached = gguf_cache.get(gguf_cache.key(base_dir, config.adapter, config.name, llama_tools.converter()))
    if cached is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(base_dir)
        _export_template(tok, config)
        out.emit(P.Log(message=f"{config.label}: the f16 GGUF its llama.cpp evaluation converted is quantized (no "
                               "second merge and conversion)"))
        out.progress(STAGE_MERGE, 3, 3)
        return cached, tok, True
    tok = merged(config, models_dir, folder / "hf", out)
    out.progress(STAGE_CONVERT, 0, 1)
    f16 = llama_tools.convert(folder / "hf", folder / f"{config.name}.f16.gguf", log, config.name)
    shutil.rmtree(folder / "hf", ignore_errors=True)
    return f16, tok, False


def check_template(gguf: Path, tok) -> tuple[str, str]:
    """The GGUF's embedded template renders PROBE (tool calls included) exactly as the training renderer does."""
    import llama_cpp
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from engine.render import Renderer

    llm = llama_cpp.Llama(str(gguf), vocab_only=True, verbose=False)
    try:
        embedded = llm.metadata.get("tokenizer.chat_template") or ""
        eos = llm._model.token_get_text(llm.token_eos()) if llm.token_eos() >= 0 else ""
        bos = llm._model.token_get_text(llm.token_bos()) if llm.token_bos() >= 0 else ""
    finally:
        llm.close()
    if not embedded:
        raise ShipError("the GGUF carries no chat template", fix="the converter did not embed it: report this")
    training = Renderer(tok, "export").text(ship_template.PROBE)
    shipped = Jinja2ChatFormatter(embedded, eos_token=eos, bos_token=bos, add_generation_prompt=False)(
        messages=ship_template.PROBE).prompt
    if shipped != training:
        raise ShipError("the chat template embedded in the GGUF renders differently from training",
                        why=f"training: {training[:200]!r} … shipped: {shipped[:200]!r}",
                        fix="report this with the base model's name; the model would not follow its training format")
    return embedded, eos


def run(spec: dict, out: Emitter) -> int:
    config = ExportConfig.model_validate(spec["config"])
    folder = Path(spec["out"])
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "convert.log"
    llama_tools.converter()  # a missing converter fails before minutes of merging
    from engine.loading import is_full_model

    lora = config.lora and config.adapter and not is_full_model(config.adapter)  # a full fine-tune has no LoRA file
    if lora:
        llama_tools.converter("convert_lora_to_gguf.py")
    f16, tok, shared = _f16(config, Path(spec["models_dir"]), folder, log, out)
    out.progress(STAGE_CONVERT, 1, 1)
    embedded, eos = check_template(f16, tok)
    files = []
    for i, quant in enumerate(config.quants):
        out.progress(STAGE_QUANTIZE, i, len(config.quants))
        if quant == "f16":
            path = folder / f"{config.name}.f16.gguf"
            if shared:
                shutil.copyfile(f16, path)  # the export folder owns its files; the cache prunes its own
        else:
            path = llama_tools.quantize(f16, folder / f"{config.name}.{quant}.gguf", quant)
        files.append({"quant": quant, "file": path.name})
    out.progress(STAGE_QUANTIZE, len(config.quants), len(config.quants))
    if "f16" not in config.quants and not shared:
        f16.unlink()
    lora_file = None
    if lora:
        out.progress(STAGE_LORA, 0, 1)
        from engine import loading

        base_dir = Path(loading.resolve(config.base_model, Path(spec["models_dir"]))[0])
        lora_file = llama_tools.convert_lora(Path(config.adapter), base_dir, folder / f"{config.name}.lora.gguf",
                                             log).name
        out.progress(STAGE_LORA, 1, 1)
    for i, entry in enumerate(files):
        out.progress(STAGE_SMOKE, i, len(files))
        entry.update(smoke.smoke(folder / entry["file"], config.n_ctx) if config.smoke else
                     {"ok": None, "why": "not smoke-tested"})
        out.emit(P.Log(message=f"{entry['file']}: " + (
            f"answers and stops, {entry['tokens_per_s']} tok/s, loads in {entry['load_s']} s" if entry["ok"]
            else entry["why"])))
    out.progress(STAGE_SMOKE, len(files), len(files))
    body = P.Exported(label=config.label, path=str(folder), files=files, lora_file=lora_file,
                      template_sha256=hashlib.sha256(embedded.encode()).hexdigest(),
                      stop=ship_template.stop_strings(embedded, eos), eos_token=eos, bos_token=tok.bos_token or "",
                      template=embedded)
    (folder / "export.json").write_text(json.dumps(body.model_dump(), indent=1), encoding="utf-8")
    out.emit(body)
    return 0


def main(argv: list[str] | None = None) -> int:
    return worker_main(argv, "engine.workers.export", "a GGUF export", run)


if __name__ == "__main__":
    sys.exit(main())
