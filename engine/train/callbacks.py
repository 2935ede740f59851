"""TrainerCallback that turns trainer events into protocol events and obeys pause / resume / stop / checkpoint_now."""
from __future__ import annotations

import math
import time

from transformers import TrainerCallback

from app.core.base import protocol as P
from engine.train import distributed
from engine.train import monitor
from engine.train.jobsocket import EngineServer

PROGRESS_MIN_INTERVAL_S = 0.1  # progress events at most 10 Hz


class StreamCallback(TrainerCallback):
    """Streams progress/metrics/checkpoints over the engine server and applies client commands between steps."""

    def __init__(self, server: EngineServer, torch_module=None) -> None:
        self.server = server
        self.torch = torch_module
        self.started = time.monotonic()
        self.start_step = 0
        self._last_progress = 0.0
        self._last_tokens: tuple[float, float] | None = None  # (time, num_tokens)
        self.first_loss: float | None = None
        self.last_loss: float | None = None
        self.tokens_per_s: list[float] = []
        self.last_reward: float | None = None
        self.save_reason = "scheduled"  # read (and reset) by the checkpoint callback

    # --- trainer hooks -----------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.monotonic()
        self._last_tokens = None  # the first log sets the baseline (a resumed run's counter does not start at 0)
        self.start_step = state.global_step
        if world := distributed.describe():  # e.g. "2 processes (gloo, cpu)"
            self.server.emit(P.Log(message=world))
        self.server.emit(P.State(state="running", detail=f"{state.max_steps} steps"
                                 + (f", from step {state.global_step}" if state.global_step else "")))
        self._progress(state, force=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if not state.is_world_process_zero:
            return
        if "eval_loss" in logs and "loss" not in logs:
            self.server.emit(P.Metrics(step=state.global_step, eval_loss=_num(logs["eval_loss"])))
            return
        if "loss" not in logs:
            return
        loss = float(logs["loss"])
        if math.isfinite(loss):
            self.first_loss = loss if self.first_loss is None else self.first_loss
            self.last_loss = loss
        reward = _num(logs.get("reward"))
        self.last_reward = reward if reward is not None else self.last_reward
        rewards = {k.split("/")[-2].removeprefix("reward_"): float(v) for k, v in logs.items()
                   if k.startswith("rewards/") and k.endswith("/mean") and isinstance(v, (int, float))}
        self.server.emit(P.Metrics(step=state.global_step, loss=loss, lr=_num(logs.get("learning_rate")),
                                   grad_norm=_num(logs.get("grad_norm")), tokens_per_s=self._rate(logs),
                                   reward=reward, rewards=rewards, margin=_num(logs.get("rewards/margins")),
                                   accuracy=_num(logs.get("rewards/accuracies")), **monitor.readings(self.torch)))

    def on_step_end(self, args, state, control, **kwargs):
        self._progress(state, force=state.global_step >= state.max_steps)
        c = self.server.controls
        flags = distributed.exchange(c)  # one snapshot (rank 0's when there are several processes)
        if flags.checkpoint:
            c.checkpoint_requested.clear()
            control.should_save = True
            self.save_reason = "requested"
        if flags.paused:
            flags = self._wait_while_paused(state)
        if flags.stop:
            self.server.emit(P.State(state="stopping", detail="saving a checkpoint, then exiting"))
            control.should_save = True
            control.should_training_stop = True
            self.save_reason = "stop"
        return control

    def on_save(self, args, state, control, **kwargs):
        distributed.barrier()  # every process has written its part before rank 0 seals the checkpoint

    def on_train_end(self, args, state, control, **kwargs):
        self._progress(state, force=True)  # the last step is always reported, throttle or not

    # --- helpers -----------------------------------------------------------------------------
    def _wait_while_paused(self, state) -> distributed.Flags:
        self.server.emit(P.State(state="paused", detail=f"at step {state.global_step}"))
        paused_at = time.monotonic()
        flags = distributed.wait_while_paused(self.server.controls)
        self.started += time.monotonic() - paused_at  # the ETA ignores time spent paused
        if not flags.stop:
            self.server.emit(P.State(state="running", detail="resumed"))
        return flags

    def _progress(self, state, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_progress < PROGRESS_MIN_INTERVAL_S:
            return
        self._last_progress = now
        elapsed = now - self.started
        step, total = state.global_step, max(state.max_steps, 1)
        done = step - self.start_step
        eta = elapsed / done * (total - step) if done > 0 else None
        self.server.emit(P.Progress(step=step, total=total, epoch=state.epoch, eta_s=eta, elapsed_s=elapsed))

    def _rate(self, logs: dict) -> float | None:
        tokens = logs.get("num_tokens", logs.get("num_input_tokens_seen"))
        now = time.monotonic()
        if tokens is None:
            return None
        if self._last_tokens is None:
            self._last_tokens = (now, float(tokens))
            return None
        t0, n0 = self._last_tokens
        self._last_tokens = (now, float(tokens))
        if now - t0 <= 0:
            return None
        rate = (float(tokens) - n0) / (now - t0)
        self.tokens_per_s.append(rate)
        return rate


def _num(value) -> float | None:
    return None if value is None else float(value)
