"""The recipe lifecycle every training method shares (torchtune-like): setup -> train -> save_checkpoint -> cleanup.

TRL does the training; a recipe says how its data is shaped, which TRL config/trainer it uses and its extra
arguments. The base handles the model (LoRA / QLoRA / full, an optional starting adapter), the step plan,
checkpoints that resume, the checker, the budget, the dry run and the result.
"""
from __future__ import annotations

import gc
import json
import math
import statistics
from pathlib import Path

from app.core.base import protocol as P
from app.core.base.files import atomic_write
from app.core.base.fingerprint import code_hash, sha256_dir, sha256_file
from app.core.train import checkpoints as ckpt
from app.core.train.spec import JobSpec
from engine.train import adapters
from engine.train import heap
from engine.errors import EngineError
from engine.train.jobsocket import EngineServer


def read_snapshot(path: str | None, sha256: str | None, what: str = "dataset") -> list[dict]:
    """The job's data snapshot, refused if it is not the one the spec was written for."""
    if not path:
        return []
    file = Path(path)
    if not file.is_file():
        raise EngineError(f"the {what} snapshot is missing", why=f"{file} does not exist",
                          fix="start the job again from the original file")
    if sha256_file(file) != sha256:
        raise EngineError(f"the {what} snapshot changed after the job was created",
                          why="its sha256 no longer matches the spec", fix="start the job again")
    with file.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


class Recipe:
    """One training method. Subclasses set `name`, `rows()`, `config_class()`, `make_trainer()`."""

    name = "base"
    uses_training_template = False  # SFT swaps in a template with {% generation %} markers

    def __init__(self, spec: JobSpec, spec_sha256: str, server: EngineServer) -> None:
        self.spec, self.spec_sha256, self.server = spec, spec_sha256, server
        self.h = spec.hyper
        self.run_dir = Path(spec.run_dir)
        self.ckpt_root = self.run_dir / "checkpoints"
        self.trainer = None
        self.tokenizer = None
        self.original_template: str | None = None
        self.label = spec.model
        self.resume_from: ckpt.CheckpointInfo | None = None
        self.callbacks: dict[str, object] = {}
        self.output = None

    # --- what subclasses provide -------------------------------------------------------------
    def rows(self, records: list[dict]) -> list[dict]:
        """The snapshot's records in the shape the TRL trainer takes."""
        raise NotImplementedError

    def config_class(self):
        raise NotImplementedError

    def recipe_args(self) -> dict:
        """Recipe-specific config arguments (beta, max_length, generations …)."""
        return {}

    def make_trainer(self, model, args, train, evaluation, peft_config, callbacks):
        raise NotImplementedError

    def prepare_tokenizer(self) -> None:
        """Adjust the tokenizer before training (SFT: a template with generation markers)."""

    def rows_per_epoch(self, rows: list[dict]) -> int:
        """How many rows the trainer makes of `rows` for one epoch (SFT packing: fewer, longer ones)."""
        return len(rows)

    def examples_per_step(self) -> int:
        """How many trainer rows one optimiser step consumes."""
        return self.h.batch_size * self.h.grad_accum * max(self.spec.processes, 1)

    def tokens_of(self, rows: list[dict]) -> int:
        """Tokens a pass over `rows` trains on (for the plan, the ETA and the token budget)."""
        return sum(len(self.tokenizer.apply_chat_template(_messages_of(r), tokenize=True, return_dict=True)
                       ["input_ids"]) for r in rows)

    # --- plan --------------------------------------------------------------------------------
    def plan_steps(self, n_rows: int) -> int:
        """min(max_steps, epochs x steps per epoch): max_steps is a cap, so a small file is not repeated 1000x."""
        per_epoch = max(1, math.ceil(n_rows / max(self.examples_per_step(), 1)))
        return max(1, min(self.h.max_steps, math.ceil(self.h.epochs * per_epoch)))

    def training_args(self, steps: int, has_eval: bool):
        import torch

        cuda = torch.cuda.is_available()
        h = self.h
        common = {
            "output_dir": str(self.ckpt_root), "max_steps": steps, "per_device_train_batch_size": h.batch_size,
            "per_device_eval_batch_size": h.batch_size, "gradient_accumulation_steps": h.grad_accum,
            "learning_rate": h.lr(self.name), "warmup_steps": h.warmup, "logging_steps": h.logging_steps,
            "save_strategy": "steps", "save_steps": h.save_steps, "save_total_limit": None,
            "eval_strategy": "steps" if has_eval else "no", "eval_steps": h.save_steps if has_eval else None,
            "seed": h.seed, "data_seed": h.seed, "report_to": "none", "disable_tqdm": True,
            "bf16": cuda and torch.cuda.is_bf16_supported(), "use_cpu": not cuda, "dataloader_num_workers": 0,
            "include_num_input_tokens_seen": "non_padding", "remove_unused_columns": False,
            "logging_nan_inf_filter": False, "ddp_find_unused_parameters": False,  # a NaN loss is logged as NaN (the checker stops the run), not hidden
        }
        common.update(self.recipe_args())
        return self.config_class()(**common)

    # --- lifecycle ---------------------------------------------------------------------------
    def setup(self) -> None:
        """Load data, model and tokenizer; find the checkpoint to resume from; build the trainer."""
        from datasets import Dataset

        heap.pin_mmap_threshold()  # before the model: resident memory then follows the live tensors (engine/train/heap.py)
        train = self.rows(read_snapshot(self.spec.dataset_path, self.spec.dataset_sha256))
        evaluation = self.rows(read_snapshot(self.spec.eval_path, self.spec.eval_sha256, "eval data"))
        if not train:
            raise EngineError("the dataset has no usable example for this recipe",
                              why=f"the {self.name} recipe found nothing to train on in the snapshot",
                              fix="check that the file matches the recipe (see `nightschool queue add --help`)")
        model, self.tokenizer, self.label, peft_config = adapters.load(self.spec, self._report)
        self.prepare_tokenizer()
        self.steps = self.plan_steps(self.rows_per_epoch(train))
        args = self.training_args(self.steps, bool(evaluation))
        self.resume_from = self._resume_point()
        callbacks = self._callbacks()
        self.trainer = self.make_trainer(model, args, Dataset.from_list(train),
                                         Dataset.from_list(evaluation) if evaluation else None,
                                         peft_config, callbacks)

    def train(self) -> None:
        resume = str(self.resume_from.path) if self.resume_from else None
        self.output = self.trainer.train(resume_from_checkpoint=resume)

    def save_checkpoint(self) -> Path:
        """The final adapter (or full model) with the model's own chat template."""
        target = self.run_dir / ("model" if self.h.method == "full" else "adapter")
        self.trainer.save_model(str(target))
        if self.original_template is not None:
            self.tokenizer.chat_template = self.original_template
        self.tokenizer.save_pretrained(str(target))
        return target

    def cleanup(self) -> None:
        for cb in self.callbacks.values():
            if hasattr(cb, "close"):
                cb.close()
        self.trainer = None
        gc.collect()

    def run(self) -> P.Result:
        """Setup, train, save, result: the whole job. A fatal checker finding ends it as failed."""
        try:
            self.setup()
            self.train()
            fatal = getattr(self.callbacks.get("checker"), "fatal", None)
            if fatal is not None:
                raise EngineError(f"the run was stopped: {fatal.message}", why=fatal.diagnosis.splitlines()[0]
                                  if fatal.diagnosis else "", fix=f"read {self.run_dir / 'diagnosis.md'}; the last "
                                  "good checkpoint is kept")
            self.server.emit(P.State(state="saving", detail="saving the final model"))
            target = self.save_checkpoint()
            result = self.result(target)
        finally:
            self.cleanup()
        write_result(self.run_dir, result)
        self.server.emit(P.Log(message=f"saved to {target} (base: {self.label})"))
        self.server.emit(result)
        return result

    # --- pieces ------------------------------------------------------------------------------
    def _report(self, message: str, step: int, total: int) -> None:
        self.server.emit(P.Log(message=message))
        self.server.emit(P.Progress(step=step, total=total, phase="load_model"))

    def dry_run(self) -> P.Plan:
        """Check data, model reference, method and template and say what training would do; train nothing."""
        problems: list[str] = []
        train = evaluation = []
        try:
            train = self.rows(read_snapshot(self.spec.dataset_path, self.spec.dataset_sha256))
            evaluation = self.rows(read_snapshot(self.spec.eval_path, self.spec.eval_sha256, "eval data"))
            self.tokenizer, self.label = adapters.load_tokenizer(self.spec, self._report)
            problems += adapters.method_problems(self.h.method)
            self.prepare_tokenizer()
        except EngineError as exc:
            problems.append(f"{exc.body().message}: {exc.body().why} {exc.body().fix}".strip())
        if not train and not problems:
            problems.append(f"the {self.name} recipe found no usable example in the dataset")
        ready = bool(train) and self.tokenizer is not None
        n_rows = self.rows_per_epoch(train) if ready else len(train)
        steps = self.plan_steps(n_rows) if train else 0
        tokens = 0
        if ready:
            per_pass = self.tokens_of(train)
            tokens = int(per_pass * min(self.h.epochs, steps * self.examples_per_step() / n_rows))
            if tokens > self.spec.budget.max_tokens:
                problems.append(f"the plan trains on {tokens:,} tokens, over the budget of "
                                f"{self.spec.budget.max_tokens:,}: the job would stop at the budget")
        plan = P.Plan(ok=not problems, recipe=self.name, examples=len(train), eval_examples=len(evaluation),
                      steps=steps, tokens=tokens, problems=problems)
        (self.run_dir / "plan.json").write_text(plan.model_dump_json(indent=2), encoding="utf-8")
        self.server.emit(plan)
        return plan

    def _resume_point(self) -> ckpt.CheckpointInfo | None:
        for torn in ckpt.set_aside_torn(self.ckpt_root):
            self.server.emit(P.Log(level="warning", message=f"{torn.name} was incomplete (torn by a crash): "
                                                            "removed, resuming from the last good checkpoint"))
        info = ckpt.latest_good(self.ckpt_root)
        if info is not None:
            self.server.emit(P.State(state="resuming", detail=f"from checkpoint {info.step} of {self.steps}"))
            _append_resume(self.run_dir, info.step)
        return info

    def _callbacks(self) -> list:
        import torch

        from engine.train.budget import BudgetCallback
        from engine.train.callbacks import StreamCallback
        from engine.train.checker import Checker
        from engine.train.checker_callback import CheckerCallback
        from engine.train.checkpoint_callback import CheckpointCallback

        stream = StreamCallback(self.server, torch)
        prior = self.resume_from
        warmup = int(self.h.warmup * self.steps) if self.h.warmup < 1 else int(self.h.warmup)
        self.callbacks = {
            "stream": stream,
            "checkpoint": CheckpointCallback(self.server, self.ckpt_root, self.h.keep_checkpoints, stream, prior),
            "budget": BudgetCallback(self.server, self.spec.budget, prior),
            "checker": CheckerCallback(self.server, Checker(max_steps=self.steps, warmup_steps=warmup), self.run_dir),
        }
        return list(self.callbacks.values())

    def result(self, target: Path) -> P.Result:
        stream, budget = self.callbacks["stream"], self.callbacks["budget"]
        best = ckpt.best(ckpt.scan(self.ckpt_root)[0])
        stopped = self.server.controls.stop_requested.is_set() or budget.reason
        rates = stream.tokens_per_s
        state = self.trainer.state
        return P.Result(
            job_id=self.spec.job_id, status="stopped" if stopped else "completed", adapter_path=str(target),
            adapter_sha256=sha256_dir(target), spec_sha256=self.spec_sha256, dataset_sha256=self.spec.dataset_sha256,
            base_model=self.spec.model, recipe=self.name, method=self.h.method,
            stop_reason=budget.reason or ("user" if stopped else ""),
            best_checkpoint=str(best.path) if best else None, resumed_from=_resumes(self.run_dir),
            config_fingerprint=self.spec.lineage.config_fingerprint or self.spec.config_fingerprint(),
            code_hash=self.spec.lineage.code_hash or code_hash(),
            metrics={"steps": state.global_step, "planned_steps": self.steps, "first_loss": stream.first_loss,
                     "last_loss": stream.last_loss,
                     "train_loss": self.output.training_loss if self.output else None,
                     "train_runtime_s": (self.output.metrics.get("train_runtime") if self.output else None),
                     "tokens_per_s": statistics.median(rates) if rates else None,
                     "tokens": int(state.num_input_tokens_seen or 0),
                     "best_eval_loss": best.eval_loss if best else None,
                     "last_reward": stream.last_reward},
        )


def _messages_of(row: dict) -> list[dict]:
    if "messages" in row:
        return row["messages"]
    out = list(row.get("prompt") or [])
    for key in ("chosen", "completion"):
        if isinstance(row.get(key), list):
            return out + row[key]
    return out


def _append_resume(run_dir: Path, step: int) -> None:
    path = run_dir / "resumes.json"
    steps = _resumes(run_dir) + [step]
    path.write_text(json.dumps(steps), encoding="utf-8")


def _resumes(run_dir: Path) -> list[int]:
    try:
        return [int(s) for s in json.loads((run_dir / "resumes.json").read_text(encoding="utf-8"))]
    except (OSError, ValueError, TypeError):
        return []


def write_result(run_dir: Path, result: P.Result) -> None:
    """result.json, written atomically (temp + fsync + rename)."""
    atomic_write(run_dir / "result.json", result.model_dump_json(indent=2))

