"""The experiment budget (wall-clock minutes, tokens) enforced between steps: the job stops with a checkpoint."""
from __future__ import annotations

import time

from transformers import TrainerCallback

from app.core.base import protocol as P
from app.core.train import checkpoints as ckpt
from app.core.train.spec import Budget
from engine.train.jobsocket import EngineServer


class BudgetCallback(TrainerCallback):
    """Stops training (saving a checkpoint first) when the job's wall-clock or token budget is spent."""

    def __init__(self, server: EngineServer, budget: Budget, prior: ckpt.CheckpointInfo | None = None) -> None:
        self.server, self.budget = server, budget
        self.prior_elapsed = prior.elapsed_s if prior else 0.0
        self.started = time.monotonic()
        self.reason = ""

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if self.reason:
            return control
        minutes = (self.prior_elapsed + time.monotonic() - self.started) / 60
        tokens = int(state.num_input_tokens_seen or 0)
        if minutes >= self.budget.wall_clock_min:
            self.reason = f"budget: {self.budget.wall_clock_min:g} min of training reached"
        elif tokens >= self.budget.max_tokens:
            self.reason = f"budget: {tokens:,} tokens reached (limit {self.budget.max_tokens:,})"
        if self.reason:
            self.server.emit(P.Alert(kind="budget", severity="warning", step=state.global_step,
                                     message=f"{self.reason}; stopping with a checkpoint"))
            control.should_save = True
            control.should_training_stop = True
        return control
