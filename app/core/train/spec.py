"""The experiment spec: everything the engine needs to run one job (recipe, data, model, hyper-parameters, budget,
lineage), written to spec.json (mode 0600: it holds the socket token) in the run dir."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.core.base.files import atomic_write

DEFAULT_MODEL = "default"  # the embedded SmolLM2-135M-Instruct
Recipe = Literal["sft", "dpo", "orpo", "kto", "grpo", "rloo"]
RECIPES: tuple[str, ...] = ("sft", "dpo", "orpo", "kto", "grpo", "rloo")
# What each recipe trains on: chat `messages` | preference pairs | prompts (+ the reward's context)
DATA_FORMAT = {"sft": "chat", "dpo": "preference", "orpo": "preference", "kto": "preference",
               "grpo": "prompts", "rloo": "prompts"}
# Learning rate per recipe: SFT 2e-4 and RL (GRPO/RLOO) 1.4e-5 as the source documents give them, ORPO 3e-4,
# DPO/KTO 5e-5 (the usual LoRA range).
# hyper-parameters added after fingerprints were first recorded, with their defaults: at the default they are left out
# of the fingerprint, so a configuration keeps the fingerprint it had
ADDED = {"action_weight": 1.0}
DEFAULT_LR = {"sft": 2e-4, "orpo": 3e-4, "dpo": 5e-5, "kto": 5e-5, "grpo": 1.4e-5, "rloo": 1.4e-5}


class Hyper(BaseModel):
    """Hyper-parameters; defaults: batch 2 x grad-acc 8, LoRA 16/32/0.05, warm-up 0.1, max 1000 steps, 2048 tokens.
    `max_steps` is a cap: a job runs min(max_steps, epochs x steps per epoch)."""

    model_config = ConfigDict(extra="forbid")
    method: Literal["lora", "qlora", "full"] = "lora"
    max_steps: int = 1000
    epochs: float = 3.0
    learning_rate: float | None = None  # None: the recipe's default (DEFAULT_LR)
    batch_size: int = 2
    grad_accum: int = 8
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    max_length: int = 2048
    warmup: float = 0.1  # < 1: a fraction of the steps; >= 1: a number of steps
    logging_steps: int = 1
    save_steps: int = 50  # a checkpoint (and an evaluation when there is eval data) every N steps
    keep_checkpoints: int = 3  # scheduled checkpoints kept besides best, last and protected ones
    seed: int = 42
    packing: bool = False  # SFT: pack examples into max_length rows (padding-free)
    action_weight: float = Field(1.0, ge=1.0, le=20.0)  # SFT: tool-call tokens weigh this much more than prose (CPU)
    beta: float = 0.1  # DPO / ORPO / KTO
    num_generations: int = 4  # GRPO / RLOO: completions per prompt
    max_completion_length: int = 128  # GRPO / RLOO
    reward_weights: dict[str, float] | None = None  # GRPO / RLOO: None = rewards.DEFAULT_WEIGHTS

    def lr(self, recipe: str) -> float:
        return self.learning_rate if self.learning_rate is not None else DEFAULT_LR[recipe]


class Budget(BaseModel):
    """Limits the engine enforces (default 240 min wall clock, 2 M tokens); the job stops with a checkpoint."""

    model_config = ConfigDict(extra="forbid")
    wall_clock_min: float = 240.0
    max_tokens: int = 2_000_000


class Lineage(BaseModel):
    """Where a run comes from: what it trained on, with which code and settings, and from which parent."""

    model_config = ConfigDict(extra="forbid")
    config_fingerprint: str = ""
    code_hash: str = ""
    dataset_fingerprint: str = ""
    dataset_name: str | None = None
    parent_job: str | None = None
    hypothesis: str = ""


class JobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    job_id: str
    kind: Recipe = "sft"
    dataset_path: str  # the snapshot in the run dir
    dataset_sha256: str
    eval_path: str | None = None  # optional eval snapshot: eval loss, best checkpoint, overfit check
    eval_sha256: str | None = None
    model: str = DEFAULT_MODEL
    init_adapter: str | None = None  # start from a trained adapter (e.g. DPO after SFT)
    models_dir: str  # where the embedded model is cached
    run_dir: str
    socket_path: str
    token: str
    hyper: Hyper = Field(default_factory=Hyper)
    budget: Budget = Field(default_factory=Budget)
    lineage: Lineage = Field(default_factory=Lineage)
    dry_run: bool = False  # validate data, model, template and plan; train nothing
    processes: int = 1  # > 1: launched through `accelerate launch` (one process per GPU, or CPU processes)

    def write(self, path: Path) -> str:
        """Write the spec (0600) and return its sha256."""
        data = self.model_dump_json(indent=2).encode()
        atomic_write(path, data, mode=0o600)
        return hashlib.sha256(data).hexdigest()

    @classmethod
    def read(cls, path: Path) -> tuple[JobSpec, str]:
        data = Path(path).read_bytes()
        return cls.model_validate(json.loads(data)), hashlib.sha256(data).hexdigest()

    def config_fingerprint(self) -> str:
        """sha256 of what decides the outcome: recipe, model, data, hyper-parameters, budget (not paths/tokens)."""
        hyper = self.hyper.model_dump(exclude={k for k in ADDED if getattr(self.hyper, k) == ADDED[k]})
        keep = {"kind": self.kind, "model": self.model, "init_adapter": self.init_adapter,
                "dataset": self.dataset_sha256, "eval": self.eval_sha256, "hyper": hyper,
                "budget": self.budget.model_dump(), "processes": self.processes}
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()
