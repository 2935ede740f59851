"""Benchmark: train tokens/s of a Nightschool SFT engine job versus a plain TRL SFTTrainer script (prints figures)."""
from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

KEYS = ("max_steps", "num_train_epochs", "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate",
        "warmup_steps", "lr_scheduler_type", "optim", "weight_decay", "max_grad_norm", "max_length", "packing",
        "padding_free", "gradient_checkpointing", "seed", "data_seed", "logging_steps", "save_steps",
        "assistant_only_loss",
        "include_num_input_tokens_seen", "remove_unused_columns", "bf16", "use_cpu", "dataloader_num_workers")
LORA_KEYS = ("r", "lora_alpha", "lora_dropout", "target_modules", "task_type")


def prepare_model(choice: str, tmp: Path) -> tuple[str, Path]:
    """(model ref for the engine, folder for the plain script); NIGHTSCHOOL_HOME ends up as <tmp>/home."""
    from app.core.base import paths
    from engine import loading

    home = tmp / "home"
    if choice == "smollm2":
        cached = loading.materialise_embedded(paths.models_dir())  # the user's cache: built once, then reused
        (home / "models").mkdir(parents=True)
        (home / "models" / loading.EMBEDDED_DIR).symlink_to(cached.resolve(), target_is_directory=True)
        os.environ["NIGHTSCHOOL_HOME"] = str(home)
        return "default", home / "models" / loading.EMBEDDED_DIR
    from tests.tiny_model import build

    os.environ["NIGHTSCHOOL_HOME"] = str(home)
    folder = build(tmp / "tiny")
    return str(folder), folder


def planned_steps(h, n_records: int) -> int:
    """The engine's step plan: min(max_steps, epochs x steps per epoch) (max_steps is a cap, see Hyper)."""
    import math

    per_epoch = max(1, math.ceil(n_records / (h.batch_size * h.grad_accum)))
    return max(1, min(h.max_steps, math.ceil(h.epochs * per_epoch)))


def plain_config(h, out: Path, cuda: bool, steps: int):
    """The plain script's SFTConfig, written by hand with the hyper-parameters the engine uses (the steps its plan
    gives; TRL's own defaults for everything the engine leaves alone)."""
    from trl import SFTConfig

    extra = {"packing": True, "padding_free": True} if h.packing else {}
    return SFTConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=h.batch_size,
                     gradient_accumulation_steps=h.grad_accum, learning_rate=h.lr("sft"), warmup_steps=h.warmup,
                     logging_steps=h.logging_steps, save_strategy="steps", save_steps=h.save_steps, seed=h.seed,
                     data_seed=h.seed, max_length=h.max_length, assistant_only_loss=True, report_to="none",
                     disable_tqdm=True, bf16=cuda, use_cpu=not cuda, dataloader_num_workers=0,
                     include_num_input_tokens_seen="non_padding", remove_unused_columns=False, **extra)


def training_tokenizer(folder: Path):
    """The model's tokenizer with the engine's training template (renders like the model's own)."""
    from transformers import AutoTokenizer

    from engine.chat_template import training_template

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.chat_template = training_template(tokenizer.chat_template)
    return tokenizer


def median_step_s(stamps: list[float]) -> float:
    """Median seconds between consecutive per-step logs: robust to other work briefly taking the CPU (NaN with fewer
    than two steps)."""
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return statistics.median(gaps) if gaps else float("nan")


def run_plain(folder: Path, records: list[dict], h, out: Path, steps: int, attn: str | None = None) -> dict:
    """Load, patch the chat template like the engine does, train; tokens/s from the trainer's own log.
    `attn`: an attention implementation for the model (None: transformers' default, sdpa)."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTTrainer

    from engine.chat_template import training_template

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.stamps: list[float] = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            if "loss" in (logs or {}):
                self.stamps.append(time.time())

    started = time.monotonic()
    cuda = torch.cuda.is_available()
    dtype = torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype,
                                                 **({"attn_implementation": attn} if attn else {}))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.chat_template = training_template(tokenizer.chat_template)
    lora = LoraConfig(r=h.lora_r, lora_alpha=h.lora_alpha, lora_dropout=h.lora_dropout,
                      target_modules="all-linear", task_type="CAUSAL_LM")
    args, clock = plain_config(h, out, cuda, steps), StepClock()
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(records),  # PEFT edits its config:
                         processing_class=tokenizer, peft_config=copy.deepcopy(lora), callbacks=[clock])
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):  # the per-step log dicts
        output = trainer.train()
    tokens = [e["num_tokens"] for e in trainer.state.log_history if "num_tokens" in e][-1]
    runtime = output.metrics["train_runtime"]
    return {"tokens": tokens, "runtime": runtime, "tps": tokens / runtime, "wall": time.monotonic() - started,
            "steps": trainer.state.global_step, "step_s": median_step_s(clock.stamps), "config": args, "lora": lora}


def run_engine(data: Path, model_ref: str, h) -> dict:
    """Submit a real job (engine subprocess) and read tokens and train runtime from what it left in its run dir."""
    from app.core.base.store import Store
    from app.core.train.jobs import JobManager
    from app.core.train.spec import JobSpec
    from engine.train import adapters
    from engine.train.recipes.sft import SFTRecipe

    manager = JobManager(Store())
    started = time.monotonic()
    job = manager.submit(data, model=model_ref, hyper=h)
    job = manager.wait(job.id, timeout=3600)
    wall = time.monotonic() - started
    if job.state != "completed":
        raise SystemExit(f"engine job {job.id} ended {job.state}: {job.error}")
    spec, _ = JobSpec.read(Path(job.spec_path))
    run_dir = Path(spec.run_dir)
    metrics = json.loads((run_dir / "result.json").read_text())["metrics"]
    last = max((run_dir / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    history = json.loads((last / "trainer_state.json").read_text())["log_history"]
    tokens = [e["num_tokens"] for e in history if "num_tokens" in e][-1]
    runtime = metrics["train_runtime_s"]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line]
    step_s = median_step_s([e["ts"] for e in events if e["type"] == "metrics"])
    recipe = SFTRecipe(spec, "", server=None)  # only its config is built: the one the engine trained with
    config = recipe.training_args(metrics["planned_steps"], has_eval=False)
    return {"tokens": tokens, "runtime": runtime, "tps": tokens / runtime, "wall": wall, "steps": metrics["steps"],
            "step_s": step_s, "config": config, "lora": adapters.lora_config(spec)}


def print_configs(plain: dict, engine: dict) -> None:
    print(f"{'field':30} {'plain TRL':>16} {'engine':>16}")
    rows = [(k, getattr(plain["config"], k), getattr(engine["config"], k)) for k in KEYS]
    rows += [(f"lora.{k}", getattr(plain["lora"], k), getattr(engine["lora"], k)) for k in LORA_KEYS]
    for key, a, b in rows:
        print(f"{key:30} {a!s:>16} {b!s:>16}{'' if a == b else '   <-- DIFFERENT'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="tiny", help="'tiny' (built in a temp dir) or 'smollm2' (embedded)")
    parser.add_argument("--steps", type=int, default=30, help="max_steps (a cap: the plan is min(this, epochs x "
                        "steps per epoch), as in the engine)")
    parser.add_argument("--epochs", type=float, default=8.0)
    parser.add_argument("--records", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--data", choices=("chat", "traces"), default="chat",
                        help="chat: the capital-city chats of tests/tiny_model.py; traces: skewed-length agent traces "
                        "with tool calls (bench.trace_data.trace_records)")
    parser.add_argument("--short-share", type=float, default=0.0, help="traces: share of short chats among them")
    parser.add_argument("--packing", action="store_true", help="both sides with packing + padding_free")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides (0: torch's default; "
                        "see bench.machine.set_threads)")
    a = parser.parse_args(argv)
    from bench.machine import set_threads

    threads = set_threads(a.threads)
    from app.core.train.spec import Hyper
    from engine.chat_template import normalise
    from tests.tiny_model import chat_records

    with tempfile.TemporaryDirectory(prefix="ns-bench-") as tmp_name:
        tmp = Path(tmp_name)
        model_ref, folder = prepare_model(a.model, tmp)
        h = Hyper(max_steps=a.steps, epochs=a.epochs, packing=a.packing)
        tokenizer = training_tokenizer(folder)
        if a.data == "traces":
            from bench.trace_data import trace_records

            records, lengths = trace_records(a.records, tokenizer, h.max_length, short_share=a.short_share)
        else:
            records = chat_records(a.records)
            lengths = [len(tokenizer.apply_chat_template(r["messages"], tokenize=True, return_dict=False))
                       for r in records]
        steps = planned_steps(h, len(records))
        if a.packing:  # the engine plans a packed job from its packed rows (engine.train.recipes.sft.rows_per_epoch)
            import math

            from bench.trace_data import packed_rows

            rows = packed_rows(lengths, h.max_length)
            steps = min(steps, math.ceil(a.epochs * math.ceil(rows / (h.batch_size * h.grad_accum))))
            h = h.model_copy(update={"max_steps": steps})
        data = tmp / "data.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        rows_plain = [{"messages": normalise(r["messages"])} for r in records]  # what the engine's SFT recipe trains on
        plains, engines = [], []
        load_before = os.getloadavg()[0]
        for i in range(a.repeats):  # alternate which side goes first
            for side in (("engine", "plain") if i % 2 == 0 else ("plain", "engine")):
                if side == "engine":
                    engines.append(run_engine(data, model_ref, h))
                else:
                    plains.append(run_plain(folder, rows_plain, h, tmp / f"plain-{i}", steps))
    if load_before > 0.5 * (os.cpu_count() or 1):
        print("\nWARNING: the machine was busy before the run; train_runtime figures include that noise.")
    print(f"\nmodel={a.model} data={a.data} packing={a.packing} max_steps={a.steps} epochs={a.epochs} "
          f"planned steps={steps} records={a.records} repeats={a.repeats} torch threads={threads} "
          f"cpus={os.cpu_count()} loadavg(1 min) before={load_before:.2f} after={os.getloadavg()[0]:.2f}\n")
    print_configs(plains[0], engines[0])
    print(f"\n{'run':10} {'tokens':>8} {'train_s':>8} {'tokens/s':>9} {'median_step_s':>14} {'wall_s':>8}")
    for i, (p, e) in enumerate(zip(plains, engines)):
        for name, r in (("plain", p), ("engine", e)):
            print(f"{name}#{i:<4} {r['tokens']:>8.0f} {r['runtime']:>8.2f} {r['tps']:>9.1f} {r['step_s']:>14.4f} "
                  f"{r['wall']:>8.1f}")
    tp, te = (statistics.median(r["tps"] for r in rs) for rs in (plains, engines))
    sp, se = (statistics.median(r["step_s"] for r in rs) for rs in (plains, engines))
    print(f"\ntokens/s plain  (num_tokens / train_runtime, median of repeats): {tp:.1f}")
    print(f"tokens/s engine (num_tokens / train_runtime, median of repeats): {te:.1f}")
    print(f"ratio engine/plain: {te / tp:.3f}  (target >= 0.98)")
    print(f"ratio by median step time (plain/engine, robust to CPU contention): {sp / se:.3f}")
    print(f"wall s plain  (load + train, in process):              {statistics.median(r['wall'] for r in plains):.1f}")
    print(f"wall s engine (submit -> finalised: spawn, imports, load, train, save): "
          f"{statistics.median(r['wall'] for r in engines):.1f}")


if __name__ == "__main__":
    main()
