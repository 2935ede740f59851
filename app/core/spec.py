"""The job spec: everything the engine needs to run one job, written to spec.json (mode 0600) in the run dir."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_MODEL = "default"  # the embedded SmolLM2-135M-Instruct


class Hyper(BaseModel):
    """Training hyper-parameters for LoRA SFT (REFERENCE.md A.5 defaults, scaled to a laptop)."""

    model_config = ConfigDict(extra="forbid")
    max_steps: int = 60
    epochs: float = 3.0
    learning_rate: float = 2e-4
    batch_size: int = 4
    grad_accum: int = 1
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    max_length: int = 1024
    warmup: float = 0.0  # < 1: a fraction of the steps; >= 1: a number of steps
    logging_steps: int = 1
    save_steps: int = 50
    seed: int = 42


class JobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    job_id: str
    kind: str = "sft"
    dataset_path: str  # the snapshot in the run dir
    dataset_sha256: str
    model: str = DEFAULT_MODEL
    models_dir: str  # where the embedded model is cached
    run_dir: str
    socket_path: str
    token: str
    hyper: Hyper = Field(default_factory=Hyper)

    def write(self, path: Path) -> str:
        """Write the spec (0600) and return its sha256."""
        data = self.model_dump_json(indent=2).encode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return hashlib.sha256(data).hexdigest()

    @classmethod
    def read(cls, path: Path) -> tuple[JobSpec, str]:
        data = Path(path).read_bytes()
        return cls.model_validate(json.loads(data)), hashlib.sha256(data).hexdigest()
