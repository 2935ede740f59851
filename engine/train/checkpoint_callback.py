"""Checkpoints that resume: each one is sealed with a marker after the trainer wrote it (optimizer, scheduler, RNG,
trainer state with the step and data position), reported, and old ones pruned (never best, last or kept ones)."""
from __future__ import annotations

import time
from pathlib import Path

from transformers import TrainerCallback

from app.core.base import protocol as P
from app.core.train import checkpoints as ckpt
from engine.train.jobsocket import EngineServer


class CheckpointCallback(TrainerCallback):
    """Seals, reports and prunes checkpoints; remembers the latest eval and train loss for the marker."""

    def __init__(self, server: EngineServer, root: Path, keep_last: int, stream,
                 prior: ckpt.CheckpointInfo | None = None) -> None:
        self.server, self.root, self.keep_last, self.stream = server, Path(root), keep_last, stream
        self.prior_elapsed = prior.elapsed_s if prior else 0.0
        self.started = time.monotonic()
        self.eval_loss: float | None = None
        self.train_loss: float | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.monotonic()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.train_loss = float(logs["loss"])

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if metrics and "eval_loss" in metrics:
            self.eval_loss = float(metrics["eval_loss"])

    def elapsed(self) -> float:
        """Training time over every attempt of this job (the wall-clock budget counts it)."""
        return self.prior_elapsed + time.monotonic() - self.started

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        folder = self.root / f"checkpoint-{state.global_step}"
        reason = self.stream.save_reason
        self.stream.save_reason = "scheduled"
        ckpt.write_marker(folder, state.global_step, eval_loss=self.eval_loss, train_loss=self.train_loss,
                          elapsed_s=self.elapsed(), tokens=int(state.num_input_tokens_seen or 0), reason=reason)
        self.server.emit(P.Checkpoint(step=state.global_step, path=str(folder), reason=reason))
        for gone in ckpt.prune(self.root, self.keep_last):
            self.server.emit(P.Log(level="debug", message=f"retention: removed {gone.name}"))
