"""LoRA SFT recipe: TRL SFTTrainer + PEFT on chat `messages` JSONL, loss on assistant tokens only.

Shape (torchtune-like): setup -> train -> save -> result. The engine entry point supplies the server.
"""
from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

from app.core import protocol as P
from app.core.fingerprint import sha256_dir, sha256_file
from app.core.spec import JobSpec
from engine import chat_template, models
from engine.errors import EngineError
from engine.server import EngineServer


def load_records(spec: JobSpec) -> list[dict]:
    """Read the dataset snapshot; refuse it if it is not the one the spec was written for."""
    path = Path(spec.dataset_path)
    if not path.is_file():
        raise EngineError("the dataset snapshot is missing", why=f"{path} does not exist",
                          fix="start the job again from the original file")
    if sha256_file(path) != spec.dataset_sha256:
        raise EngineError("the dataset snapshot changed after the job was created",
                          why="its sha256 no longer matches the spec", fix="start the job again")
    with path.open(encoding="utf-8") as fh:
        return [{"messages": chat_template.normalise(json.loads(line)["messages"])} for line in fh if line.strip()]


def training_args(spec: JobSpec, cuda: bool):
    from trl import SFTConfig

    h = spec.hyper
    return SFTConfig(
        output_dir=str(Path(spec.run_dir) / "trainer"),
        max_steps=h.max_steps if h.max_steps > 0 else -1,
        num_train_epochs=h.epochs,
        per_device_train_batch_size=h.batch_size,
        gradient_accumulation_steps=h.grad_accum,
        learning_rate=h.learning_rate,
        warmup_steps=h.warmup,
        logging_steps=h.logging_steps,
        save_strategy="steps",
        save_steps=h.save_steps,
        save_total_limit=3,
        seed=h.seed,
        max_length=h.max_length,
        assistant_only_loss=True,
        report_to="none",
        disable_tqdm=True,
        bf16=cuda,
        use_cpu=not cuda,
        dataloader_num_workers=0,
    )


def lora_config(spec: JobSpec):
    from peft import LoraConfig

    h = spec.hyper
    return LoraConfig(r=h.lora_r, lora_alpha=h.lora_alpha, lora_dropout=h.lora_dropout,
                      target_modules="all-linear", task_type="CAUSAL_LM")


def prepare_tokenizer(tokenizer, server: EngineServer) -> str | None:
    """Swap in a training template with generation markers; return the original to save with the adapter."""
    original = tokenizer.chat_template
    patched = chat_template.training_template(original)
    if patched is None:
        raise EngineError("this model's chat template cannot mark assistant tokens",
                          why="loss must fall on assistant turns only, and no training template is known for it",
                          fix="choose a model with a ChatML or TRL-supported chat template")
    if patched != original:
        server.emit(P.Log(message="chat template: added {% generation %} markers for assistant-only loss"))
    tokenizer.chat_template = patched
    return original


def build_trainer(spec: JobSpec, server: EngineServer, callback):
    """Load model + data and return (trainer, tokenizer, original template, base label)."""
    import torch
    from datasets import Dataset
    from trl import SFTTrainer

    def report(message: str, step: int, total: int) -> None:
        server.emit(P.Log(message=message))
        server.emit(P.Progress(step=step, total=total, phase="load_model"))

    records = load_records(spec)
    model, tokenizer, label = models.load_for_training(spec.model, Path(spec.models_dir), report)
    original = prepare_tokenizer(tokenizer, server)
    args = training_args(spec, torch.cuda.is_available())
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(records),
                         processing_class=tokenizer, peft_config=lora_config(spec), callbacks=[callback])
    return trainer, tokenizer, original, label


def save_adapter(trainer, tokenizer, original_template, run_dir: Path) -> Path:
    adapter = run_dir / "adapter"
    trainer.model.save_pretrained(str(adapter))
    tokenizer.chat_template = original_template
    tokenizer.save_pretrained(str(adapter))
    return adapter


def write_result(run_dir: Path, result: P.Result) -> None:
    """result.json, written atomically (temp + rename)."""
    tmp = run_dir / "result.json.tmp"
    tmp.write_text(result.model_dump_json(indent=2), encoding="utf-8")
    os.replace(tmp, run_dir / "result.json")


def run(spec: JobSpec, spec_sha256: str, server: EngineServer) -> P.Result:
    """Train, save the adapter, write and emit the result."""
    import torch

    from engine.callbacks import StreamCallback

    callback = StreamCallback(server, torch)
    trainer, tokenizer, original, label = build_trainer(spec, server, callback)
    output = trainer.train()
    stopped = server.controls.stop_requested.is_set()
    server.emit(P.State(state="saving", detail="saving the LoRA adapter"))
    run_dir = Path(spec.run_dir)
    adapter = save_adapter(trainer, tokenizer, original, run_dir)
    rates = callback.tokens_per_s
    result = P.Result(
        job_id=spec.job_id, status="stopped" if stopped else "completed", adapter_path=str(adapter),
        adapter_sha256=sha256_dir(adapter), spec_sha256=spec_sha256, dataset_sha256=spec.dataset_sha256,
        base_model=spec.model,
        metrics={"steps": trainer.state.global_step, "first_loss": callback.first_loss,
                 "last_loss": callback.last_loss, "train_loss": output.training_loss,
                 "train_runtime_s": output.metrics.get("train_runtime"),
                 "tokens_per_s": statistics.median(rates) if rates else None},
    )
    write_result(run_dir, result)
    server.emit(P.Log(message=f"adapter saved to {adapter} (base: {label})"))
    server.emit(result)
    return result
