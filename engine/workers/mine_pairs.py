"""Preference-pair worker: `python -m engine.workers.mine_pairs --spec FILE` asks a student (the base model, optionally with a LoRA
adapter or checkpoint) for its next action at teacher contexts, and writes the disagreements as preference_v1 pairs
(app.core.datasets.pairs). Protocol envelopes (progress, log, built, error) go to stdout, one JSON line each; the
caller registers the folder. Generation is greedy (`model.generate`, do_sample=False): the same student gives the
same answers."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from app.core.base import protocol as P
from app.core.base.fingerprint import sha256_file
from app.core.base.store import Store
from app.core.datasets import pairs
from engine.workers.envelope import Emitter, worker_main

STOP_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>")


class Student:
    """A transformers causal LM (plus a PEFT adapter) answering in the model's own chat template."""

    def __init__(self, model, tokenizer, label: str, max_new_tokens: int) -> None:
        import torch

        from engine import render

        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = model.to(self.device).eval()
        self.tok = tokenizer
        self.renderer = render.Renderer(tokenizer, label)
        self.label, self.template_sha256 = label, self.renderer.template_sha256
        self.max_new_tokens = max_new_tokens
        self.stop = stop_ids(model, tokenizer)

    def prompt(self, messages: list[dict]) -> str:
        return self.renderer.text(messages, add_generation_prompt=True)

    def generate(self, messages: list[dict]) -> tuple[str, bool]:
        """The student's next message as raw text (new tokens only, up to the first stop token), and whether it
        stopped by itself rather than at max_new_tokens."""
        enc = self.tok(self.prompt(messages), add_special_tokens=False, return_tensors="pt").to(self.device)
        with self.torch.inference_mode():
            out = self.model.generate(**enc, do_sample=False, max_new_tokens=self.max_new_tokens,
                                      eos_token_id=sorted(self.stop), pad_token_id=self.tok.pad_token_id)
        new = out[0, enc["input_ids"].shape[1]:].tolist()
        cut = next((i for i, t in enumerate(new) if t in self.stop), None)
        finished = cut is not None
        return self.tok.decode(new[:cut], skip_special_tokens=True), finished

    def count(self, messages: list[dict]) -> int:
        return self.renderer.count(messages)


def stop_ids(model, tokenizer) -> set[int]:
    """End of turn: the tokenizer's eos, the generation config's eos ids and the chat end markers in the vocabulary."""
    ids = {tokenizer.eos_token_id}
    eos = getattr(model.generation_config, "eos_token_id", None)
    ids.update(eos if isinstance(eos, list) else [eos])
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in STOP_TOKENS if t in vocab)
    return {i for i in ids if isinstance(i, int)}


def base_mismatch(adapter: Path, source: str) -> str | None:
    """A warning when the adapter says it was trained on another base model than the one it is loaded onto."""
    try:
        trained_on = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    base = trained_on.get("base_model_name_or_path") if isinstance(trained_on, dict) else None
    if not base or base == source or (Path(base).exists() and Path(base).resolve() == Path(source).resolve()):
        return None
    return f"the adapter was trained on {base}, not on {source}: its answers may be meaningless"


def load_student(config: pairs.PairsConfig, models_dir: str | Path, out: Emitter) -> Student:
    from engine import loading

    def report(msg: str, step: int, total: int) -> None:
        out.emit(P.Log(message=msg))
        out.progress("load", step, total)

    if config.adapter and not loading.is_full_model(config.adapter):
        adapter = Path(config.adapter).expanduser()
        out.emit(P.Log(message=f"loading the adapter {config.adapter}"))
        if warning := base_mismatch(adapter, loading.resolve(config.base_model, Path(models_dir))[0]):
            out.emit(P.Log(level="warning", message=warning))
    elif config.adapter:
        out.emit(P.Log(message=f"loading the fully fine-tuned model {config.adapter}"))
    model, tokenizer, label = loading.load_trained(config.base_model, Path(models_dir), config.adapter, report)
    return Student(model, tokenizer, label, config.max_new_tokens)


def run(spec: dict, out: Emitter) -> int:
    config = pairs.PairsConfig.model_validate(spec["config"])
    store = Store(spec["db"])  # a SQLite file or a PostgreSQL URL
    try:
        plan = pairs.plan(store, config)  # fails fast (no source, not an adapter) before the model is loaded
    finally:
        store.close()
    out.emit(P.Log(message=f"{len(plan.contexts)} teacher contexts from {plan.source.name}; "
                           f"{len(plan.dropped)} dropped pairs from {len(plan.dropped_files)} file(s); "
                           f"{len(plan.blind.records)} blind test pairs"))
    started = time.monotonic()
    student = load_student(config, spec["models_dir"], out)
    out.emit(P.Log(message=f"student {student.label}{' + ' + config.adapter if config.adapter else ''} loaded in "
                           f"{time.monotonic() - started:.1f}s on {student.device}; chat template "
                           f"{student.template_sha256[:12]} ({student.renderer.convention})"))
    folder = Path(spec["out"])
    man = pairs.build(plan, student, folder, out.progress, lambda msg: out.emit(P.Log(message=msg)))
    out.emit(P.Built(name=man.name, path=str(folder), manifest_sha256=sha256_file(folder / "manifest.json"),
                     fingerprint=man.fingerprint, examples=man.examples))
    return 0


def main(argv: list[str] | None = None) -> int:
    return worker_main(argv, "engine.workers.mine_pairs", "preference pairs", run)


if __name__ == "__main__":
    sys.exit(main())
