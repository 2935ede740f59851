"""TrainerCallback that turns trainer events into protocol events and obeys pause / resume / stop / checkpoint_now."""
from __future__ import annotations

import math
import time
from pathlib import Path

from transformers import TrainerCallback

from app.core import protocol as P
from engine import monitor
from engine.server import EngineServer

PROGRESS_MIN_INTERVAL_S = 0.1  # progress events at most 10 Hz


class StreamCallback(TrainerCallback):
    """Streams progress/metrics/checkpoints over the engine server and applies client commands between steps."""

    def __init__(self, server: EngineServer, torch_module=None) -> None:
        self.server = server
        self.torch = torch_module
        self.started = time.monotonic()
        self._last_progress = 0.0
        self._last_tokens: tuple[float, float] | None = None  # (time, num_tokens)
        self.first_loss: float | None = None
        self.last_loss: float | None = None
        self.tokens_per_s: list[float] = []
        self.save_reason = "scheduled"

    # --- trainer hooks -----------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.monotonic()
        self._last_tokens = (self.started, 0.0)
        self.server.emit(P.State(state="running", detail=f"{state.max_steps} steps"))
        self._progress(state, force=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "loss" not in logs:
            return
        loss = float(logs["loss"])
        if math.isfinite(loss):
            self.first_loss = loss if self.first_loss is None else self.first_loss
            self.last_loss = loss
        else:
            self.server.emit(P.Alert(kind="nan", message=f"loss is {loss} at step {state.global_step}",
                                     step=state.global_step))
        self.server.emit(P.Metrics(step=state.global_step, loss=loss, lr=_num(logs.get("learning_rate")),
                                   grad_norm=_num(logs.get("grad_norm")), tokens_per_s=self._rate(logs),
                                   **monitor.readings(self.torch)))

    def on_step_end(self, args, state, control, **kwargs):
        self._progress(state, force=state.global_step >= state.max_steps)
        c = self.server.controls
        if c.checkpoint_requested.is_set():
            c.checkpoint_requested.clear()
            control.should_save = True
            self.save_reason = "requested"
        if c.paused:
            self._wait_while_paused(state)
        if c.stop_requested.is_set():
            self.server.emit(P.State(state="stopping", detail="saving a checkpoint, then exiting"))
            control.should_save = True
            control.should_training_stop = True
            self.save_reason = "stop"
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self._progress(state, force=True)  # the last step is always reported, throttle or not

    def on_save(self, args, state, control, **kwargs):
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        self.server.emit(P.Checkpoint(step=state.global_step, path=str(path), reason=self.save_reason))
        self.save_reason = "scheduled"

    # --- helpers -----------------------------------------------------------------------------
    def _wait_while_paused(self, state) -> None:
        self.server.emit(P.State(state="paused", detail=f"at step {state.global_step}"))
        paused_at = time.monotonic()
        self.server.controls.resume_event.wait()
        self.started += time.monotonic() - paused_at  # the ETA ignores time spent paused
        if not self.server.controls.stop_requested.is_set():
            self.server.emit(P.State(state="running", detail="resumed"))

    def _progress(self, state, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_progress < PROGRESS_MIN_INTERVAL_S:
            return
        self._last_progress = now
        elapsed = now - self.started
        step, total = state.global_step, max(state.max_steps, 1)
        eta = elapsed / step * (total - step) if step else None
        self.server.emit(P.Progress(step=step, total=total, epoch=state.epoch, eta_s=eta, elapsed_s=elapsed))

    def _rate(self, logs: dict) -> float | None:
        tokens = logs.get("num_tokens")
        if tokens is None or self._last_tokens is None:
            return None
        now = time.monotonic()
        t0, n0 = self._last_tokens
        self._last_tokens = (now, float(tokens))
        if now - t0 <= 0:
            return None
        rate = (float(tokens) - n0) / (now - t0)
        self.tokens_per_s.append(rate)
        return rate


def _num(value) -> float | None:
    return None if value is None else float(value)
