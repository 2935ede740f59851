"""TrainerCallback that feeds the live checker (engine.train.checker) and acts on what it finds.

Every finding is written to ``run_dir/diagnosis.md`` + ``run_dir/alerts.jsonl`` and emitted as an ``alert``.
A fatal one (NaN/Inf, divergence, persistent gradient explosion) stops training at once *without* saving (the
weights may already be NaN; the last good checkpoint is what is kept) and is kept in ``self.fatal`` so the
recipe can end the job as failed with the diagnosis. A watchdog thread reports a stall.
"""
from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path

from transformers import TrainerCallback

from app.core.base import protocol as P
from engine.train.checker import Checker
from engine.train.findings import Finding, write_diagnosis

FAULT_ENV = "NIGHTSCHOOL_FAULT"
WATCHDOG_INTERVAL_S = 1.0


class CheckerCallback(TrainerCallback):
    """Feeds train logs / evaluations to ``checker``; alerts, writes diagnoses and stops broken runs.

    ``server`` is anything with ``emit(body)`` (the EngineServer); when it has ``controls`` and the job is
    paused, the stall clock does not run.

    Test fault (for integration tests only, never set in normal use): with the environment variable
    ``NIGHTSCHOOL_FAULT=nan_loss@N``, at the end of step N one trainable parameter is filled with NaN, so the
    next step produces a NaN loss / gradient norm and the checker must stop the run.
    """

    def __init__(self, server, checker: Checker, run_dir: str | Path,
                 watchdog_interval_s: float = WATCHDOG_INTERVAL_S) -> None:
        self.server = server
        self.checker = checker
        self.run_dir = Path(run_dir)
        self.fatal: Finding | None = None
        self.findings: list[Finding] = []
        self.watchdog_interval_s = watchdog_interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._last_eval: tuple[int, float] | None = None
        self._fault_step = _fault_step(os.environ.get(FAULT_ENV, ""))

    # --- trainer hooks -------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        warmup = None
        if args is not None and hasattr(args, "get_warmup_steps") and state.max_steps and state.max_steps > 0:
            warmup = args.get_warmup_steps(state.max_steps)
        self.checker.configure(max_steps=state.max_steps, warmup_steps=warmup)
        self.checker.touch(state.global_step)
        self.start_watchdog()

    def on_step_end(self, args, state, control, **kwargs):
        self.checker.touch(state.global_step)
        if self._fault_step is not None and state.global_step == self._fault_step:
            self._fault_step = None
            _inject_nan(kwargs.get("model"))
        return control

    def on_prediction_step(self, args, state, control, **kwargs):
        self.checker.touch()  # an evaluation is progress too

    def on_save(self, args, state, control, **kwargs):
        self.checker.touch()

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        step = state.global_step
        if "eval_loss" in logs:
            self._eval(step, logs["eval_loss"], control)
        if "loss" in logs or "grad_norm" in logs:
            found = self.checker.observe(step, loss=logs.get("loss"), lr=logs.get("learning_rate"),
                                         grad_norm=logs.get("grad_norm"))
            self._act(found, control)
        return control

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if metrics and "eval_loss" in metrics:
            self._eval(state.global_step, metrics["eval_loss"], control)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.stop_watchdog()

    # --- acting --------------------------------------------------------------------------------
    def _eval(self, step: int, value, control) -> None:
        """The trainer reports one evaluation twice (on_log, then on_evaluate): feed it once."""
        try:
            key = (step, float(value))
        except (TypeError, ValueError):
            return
        if self._last_eval is not None and self._last_eval[0] == key[0] and (
                self._last_eval[1] == key[1] or (math.isnan(key[1]) and math.isnan(self._last_eval[1]))):
            return
        self._last_eval = key
        self._act(self.checker.observe_eval(step, key[1]), control)

    def _act(self, found: list[Finding], control=None) -> None:
        for finding in found:
            with self._lock:
                self.findings.append(finding)
                try:
                    path: Path | None = write_diagnosis(self.run_dir, finding)
                except OSError as exc:  # a full disk must not hide the alert itself
                    path = None
                    self.server.emit(P.Log(level="warning", message=f"could not write the diagnosis: {exc}"))
                self.server.emit(P.Alert(kind=finding.kind, message=finding.message, step=finding.step,
                                         severity=finding.severity,
                                         diagnosis_path=str(path) if path else None))
                if finding.fatal and self.fatal is None:
                    self.fatal = finding
                    where = f"; diagnosis in {path}" if path else ""
                    self.server.emit(P.Log(level="error", message=f"training stopped by the checker: "
                                                                  f"{finding.message}{where}"))
            if finding.fatal and control is not None:
                control.should_training_stop = True
                control.should_save = False  # the weights may be NaN: keep the last good checkpoint

    # --- stall watchdog ------------------------------------------------------------------------
    def start_watchdog(self) -> None:
        if self._watchdog is not None and self._watchdog.is_alive():
            return
        self._stop.clear()
        self._watchdog = threading.Thread(target=self._watch, name="checker-watchdog", daemon=True)
        self._watchdog.start()

    def stop_watchdog(self) -> None:
        self._stop.set()
        thread, self._watchdog = self._watchdog, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _watch(self) -> None:
        while not self._stop.wait(self.watchdog_interval_s):
            controls = getattr(self.server, "controls", None)
            if controls is not None and getattr(controls, "paused", False):
                self.checker.touch()  # a paused job is not stalled
                continue
            try:
                self._act(self.checker.check_stall(time.monotonic()))
            except Exception as exc:  # the watchdog must never take the engine down
                try:
                    self.server.emit(P.Log(level="warning", message=f"stall watchdog: {exc}"))
                except Exception:
                    pass


def _fault_step(value: str) -> int | None:
    """``nan_loss@N`` -> N; anything else -> None (test faults only)."""
    name, _, at = value.strip().partition("@")
    if name != "nan_loss":
        return None
    try:
        return int(at)
    except ValueError:
        return None


def _inject_nan(model) -> None:
    """Test fault: fill the first trainable parameter with NaN so the next step's loss is NaN."""
    if model is None:
        return
    import torch

    with torch.no_grad():
        for param in model.parameters():
            if param.requires_grad:
                param.fill_(float("nan"))
                return
