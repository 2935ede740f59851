"""A live training checker: NaN/Inf, divergence, gradient blow-up, overfit, dead learning rate and stall.

Pure logic, no torch / transformers / Qt: the training callback (``engine.train.checker_callback``) feeds it the
logged numbers and acts on what it finds; tests feed it synthetic series. Every finding carries a one-line
message and a written diagnosis (what was seen with the numbers, likely causes, what to do);
``engine.train.findings`` holds Thresholds, Finding and ``write_diagnosis`` (diagnosis.md + alerts.jsonl).

Severities: ``fatal`` (the run is broken: stop it, keep the last good checkpoint) for a non-finite loss or
gradient norm, a diverging loss and a gradient explosion that persists; ``warning`` for overfitting
(val-train gap > 0.5), a dead learning rate, a stall and a single gradient spike; ``info`` for the overfit
watch band (gap 0.3-0.5). A finding of a kind is reported once, and again only after its condition has
cleared and come back.
"""
from __future__ import annotations

import math
import statistics
import threading
import time
from collections import deque

from engine.train.findings import RECENT, Finding, Severity, Thresholds, as_float, fmt, fmt_series, lines


class _Latch:
    """Reports a condition once when it appears; re-arms after it has been clear ``clear_after`` times in a row."""

    def __init__(self, clear_after: int = 1) -> None:
        self.clear_after = max(1, clear_after)
        self.active = False
        self._clear = 0

    def update(self, condition: bool) -> bool:
        """True when the condition has just appeared (the moment to report it)."""
        if condition:
            self._clear = 0
            if not self.active:
                self.active = True
                return True
            return False
        if self.active:
            self._clear += 1
            if self._clear >= self.clear_after:
                self.active = False
        return False


class Checker:
    """Watches one run. Feed it every logged train point (``observe``), every evaluation (``observe_eval``),
    call ``touch`` on every step and ``check_stall`` from a watchdog. Thread-safe (one lock)."""

    def __init__(self, thresholds: Thresholds | None = None, max_steps: int | None = None,
                 warmup_steps: float | None = None, now: float | None = None) -> None:
        self.t = thresholds or Thresholds()
        self.max_steps = max_steps if max_steps and max_steps > 0 else None
        self._warmup = warmup_steps
        self._lock = threading.RLock()
        self.findings: list[Finding] = []
        self.fatal: Finding | None = None  # the first fatal finding
        # series
        self.losses: deque[tuple[int, float]] = deque(maxlen=max(RECENT, self.t.gap_window))
        self.grad_norms: deque[tuple[int, float]] = deque(maxlen=RECENT)
        self.lrs: deque[tuple[int, float]] = deque(maxlen=RECENT)
        self._grad_history: deque[float] = deque(maxlen=max(1, self.t.grad_window))
        self.ema: float | None = None
        self._points = 0
        self.best: tuple[float, int] | None = None  # (best smoothed loss, its step)
        self._above = 0
        self._spikes = 0
        self._bad_grads = 0
        self._dead_since: int | None = None
        self.last_step: int | None = None
        self.last_activity: float | None = None if now is None else now
        # one latch per reportable condition
        self._latch = {
            "nan": _Latch(), "divergence": _Latch(), "grad-spike": _Latch(self.t.grad_rearm_points),
            "grad-explosion": _Latch(), "overfit": _Latch(), "overfit-watch": _Latch(), "dead-lr": _Latch(),
            "stall": _Latch(),
        }

    # --- configuration -------------------------------------------------------------------------
    def configure(self, max_steps: int | None = None, warmup_steps: float | None = None) -> None:
        """Fill in the schedule once the trainer knows it (values already given are kept)."""
        with self._lock:
            if self.max_steps is None and max_steps and max_steps > 0:
                self.max_steps = int(max_steps)
            if self._warmup is None and warmup_steps is not None:
                self._warmup = warmup_steps

    @property
    def warmup_steps(self) -> int:
        """Warm-up in steps (a value below 1 is a fraction of max_steps, as in TrainingArguments)."""
        w = self._warmup or 0
        if 0 < w < 1:
            return math.ceil(w * self.max_steps) if self.max_steps else 0
        return int(w)

    # --- feeding -------------------------------------------------------------------------------
    def touch(self, step: int | None = None, now: float | None = None) -> None:
        """A step happened (or other progress: an evaluation batch, a save): resets the stall clock."""
        with self._lock:
            self.last_activity = time.monotonic() if now is None else now
            if step is not None:
                self.last_step = step
            self._latch["stall"].update(False)

    def observe(self, step: int, loss: float | None = None, lr: float | None = None,
                grad_norm: float | None = None, now: float | None = None) -> list[Finding]:
        """One logged training point (any of the values may be missing)."""
        with self._lock:
            self.touch(step, now)
            out: list[Finding] = []
            loss, lr, grad_norm = as_float(loss), as_float(lr), as_float(grad_norm)
            if lr is not None and math.isfinite(lr):
                self.lrs.append((step, lr))
            out += self._nonfinite(step, loss, grad_norm)
            grad_ok = grad_norm is None or math.isfinite(grad_norm)
            if loss is not None and math.isfinite(loss) and grad_ok:  # beside a NaN grad, the loss is a filtered one
                self.losses.append((step, loss))
                out += self._divergence(step, loss)
            if grad_norm is not None and math.isfinite(grad_norm):
                out += self._grads(step, grad_norm)
            if lr is not None and math.isfinite(lr):
                out += self._dead_lr(step, lr)
            return self._record(out)

    def observe_eval(self, step: int, eval_loss: float | None, now: float | None = None) -> list[Finding]:
        """One evaluation: a non-finite eval loss is fatal; otherwise the val-train gap is checked."""
        with self._lock:
            self.touch(step, now)
            value = as_float(eval_loss)
            if value is None:
                return []
            if not math.isfinite(value):
                if not self._latch["nan"].update(True):
                    return []
                return self._record(self._nan_finding(step, "eval loss", value))
            train = [v for _, v in list(self.losses)[-self.t.gap_window:]]
            if not train:
                return []
            train_loss = statistics.fmean(train)
            gap = value - train_loss
            over = self._latch["overfit"].update(gap > self.t.overfit_gap)
            watch = self._latch["overfit-watch"].update(gap > self.t.overfit_watch_gap)
            evidence = {"eval_loss": value, "train_loss": train_loss, "gap": gap, "train_points": len(train),
                        "recent_losses": self._series(self.losses)}
            out: list[Finding] = []
            if over:
                out.append(self._overfit(step, value, train_loss, gap, evidence, "warning"))
            elif watch and gap <= self.t.overfit_gap:
                out.append(self._overfit(step, value, train_loss, gap, evidence, "info"))
            return self._record(out)

    def check_stall(self, now: float | None = None) -> list[Finding]:
        """From a watchdog: a warning when no step has happened for ``stall_s`` seconds (once per stall)."""
        with self._lock:
            now = time.monotonic() if now is None else now
            if self.last_activity is None:
                return []
            idle = now - self.last_activity
            if not self._latch["stall"].update(idle >= self.t.stall_s):
                return []
            step = self.last_step
            where = f"step {step}" if step is not None else "the start"
            return self._record([Finding(
                "stall", "warning", step, f"no training step for {idle:.0f} s (last: {where})",
                lines(
                    f"Seen: no step, evaluation batch or save for {idle:.0f} s (limit {self.t.stall_s:.0f} s); "
                    f"the last step was {where}{self._schedule_note(step)}.",
                    "Likely causes: the machine is swapping (out of RAM) or the GPU is out of memory and "
                    "thrashing; a data-loading or tokenisation hang; a deadlock; the computer went to sleep; "
                    "a single step that is far too big (batch size x max length) for this machine.",
                    "What to do: look at the RAM / VRAM readings and the engine's log; if nothing moves, stop "
                    "the job and resume from the last checkpoint with a smaller batch size or max length; close "
                    "other programs using the GPU.",
                ),
                {"idle_s": idle, "last_step": step, "stall_s": self.t.stall_s,
                 "recent_losses": self._series(self.losses)},
            )])

    # --- the checks ----------------------------------------------------------------------------
    def _nonfinite(self, step: int, loss: float | None, grad_norm: float | None) -> list[Finding]:
        bad_loss = loss is not None and not math.isfinite(loss)
        if grad_norm is not None:
            self._bad_grads = self._bad_grads + 1 if not math.isfinite(grad_norm) else 0
        bad_grad = self._bad_grads >= max(1, self.t.nonfinite_grad_patience)
        if not self._latch["nan"].update(bad_loss or bad_grad):
            return []
        if bad_loss:
            return self._nan_finding(step, "loss", loss, grad_norm)
        return self._nan_finding(step, "grad norm", grad_norm, loss)

    def _nan_finding(self, step: int, what: str, value: float, other: float | None = None) -> list[Finding]:
        lr = self.lrs[-1][1] if self.lrs else None
        note = ""
        if what == "grad norm":
            note = (f" The logged loss was {fmt(other)}: the trainer leaves non-finite losses out of its logged "
                    "average (logging_nan_inf_filter), so the loss can look normal (or read 0) while the "
                    "gradients are already NaN.")
        return [Finding(
            "nan", "fatal", step, f"{what} is {value} at step {step}",
            lines(
                f"Seen: the {what} became {value} at step {step}{self._schedule_note(step)}; the last finite "
                f"losses were {fmt_series(self.losses)}; gradient norms {fmt_series(self.grad_norms)}; "
                f"learning rate {fmt(lr)}.{note}",
                "The weights are most likely corrupted from here on, so the run was stopped without saving; "
                "the last good checkpoint is the one to keep.",
                "Likely causes: a learning rate too high for this model; fp16 overflow; an example with no "
                "trained (assistant) tokens or an extremely long or garbled one; gradient clipping switched off.",
                "What to do: lower the learning rate 3-10x and add a warm-up; train in bf16 (or fp32), not fp16; "
                "keep max_grad_norm at 1.0; check the dataset for empty, huge or binary-looking examples; then "
                "restart, or resume from the last checkpoint.",
            ),
            {what.replace(" ", "_"): value, "lr": lr, "recent_losses": self._series(self.losses),
             "recent_grad_norms": self._series(self.grad_norms)},
        )]

    def _divergence(self, step: int, loss: float) -> list[Finding]:
        t = self.t
        self._points += 1
        alpha = max(t.ema_alpha, 1.0 / self._points)  # a running mean until the EMA has enough points
        self.ema = loss if self.ema is None else alpha * loss + (1 - alpha) * self.ema
        if step < t.divergence_warmup_steps or self._points < t.divergence_min_points:
            return []
        if self.best is None or self.ema < self.best[0]:
            self.best = (self.ema, step)
        best, best_step = self.best
        diverging = self.ema > t.divergence_factor * best and self.ema - best >= t.divergence_min_rise
        self._above = self._above + 1 if diverging else 0
        if not self._latch["divergence"].update(self._above >= max(1, t.divergence_patience)):
            return []
        ratio = self.ema / best if best > 0 else math.inf
        lr = self.lrs[-1][1] if self.lrs else None
        return [Finding(
            "divergence", "fatal", step,
            f"loss diverging: smoothed loss {self.ema:.3g} is {ratio:.1f}x its best {best:.3g} (step {step})",
            lines(
                f"Seen: the smoothed training loss fell to {best:.4g} at step {best_step}, then rose to "
                f"{self.ema:.4g} by step {step}{self._schedule_note(step)} ({ratio:.1f}x; the limit is "
                f"{t.divergence_factor}x and +{t.divergence_min_rise}); recent losses {fmt_series(self.losses)}; "
                f"gradient norms {fmt_series(self.grad_norms)}; learning rate {fmt(lr)}.",
                "Likely causes: a learning rate too high (or a warm-up too short) so the optimiser overshoots; "
                "a stretch of bad data (garbled, duplicated or mislabelled examples); gradient clipping off; "
                "fp16 instability.",
                f"What to do: restart from the checkpoint nearest step {best_step} with the learning rate divided "
                "by 3-10 and a longer warm-up; keep max_grad_norm at 1.0; inspect the examples trained on just "
                "before the rise.",
            ),
            {"smoothed_loss": self.ema, "best_smoothed_loss": best, "best_step": best_step, "ratio": ratio,
             "lr": lr, "recent_losses": self._series(self.losses),
             "recent_grad_norms": self._series(self.grad_norms)},
        )]

    def _grads(self, step: int, norm: float) -> list[Finding]:
        t = self.t
        history = list(self._grad_history)
        median = statistics.median(history) if len(history) >= t.grad_warmup_points else None
        relative = median is not None and norm > t.grad_factor * median and norm > t.grad_floor
        spike = relative or norm > t.grad_ceiling
        self.grad_norms.append((step, norm))
        if not spike:
            self._grad_history.append(norm)
        self._spikes = self._spikes + 1 if spike else 0
        fatal = self._spikes >= max(1, t.grad_patience)
        new_spike = self._latch["grad-spike"].update(spike)
        new_fatal = self._latch["grad-explosion"].update(fatal)
        if not (new_spike or new_fatal):
            return []
        if relative:
            against = (f"{norm / median:.0f}x the running median {median:.3g}" if median > 0
                       else "the running median is 0")
        else:
            against = f"over the ceiling {t.grad_ceiling:g}"
        lr = self.lrs[-1][1] if self.lrs else None
        evidence = {"grad_norm": norm, "median": median, "consecutive": self._spikes, "lr": lr,
                    "recent_grad_norms": self._series(self.grad_norms), "recent_losses": self._series(self.losses)}
        causes = ("Likely causes: a learning rate too high; an outlier batch (a very long, repetitive or garbled "
                  "example); gradient clipping off; fp16 overflow.")
        seen = (f"Seen: gradient norm {norm:.4g} at step {step}{self._schedule_note(step)} ({against}); recent "
                f"norms {fmt_series(self.grad_norms)}; losses {fmt_series(self.losses)}; learning rate "
                f"{fmt(lr)}.")
        if new_fatal:
            return [Finding(
                "grad-explosion", "fatal", step,
                f"gradient explosion: {self._spikes} spikes in a row, grad norm {norm:.3g} (step {step})", lines(
                    seen + f" The norm stayed abnormal for {self._spikes} logged steps in a row (limit "
                    f"{t.grad_patience}), so the run was stopped before the weights are ruined.",
                    causes,
                    "What to do: lower the learning rate 3-10x, keep max_grad_norm at 1.0, train in bf16 rather "
                    "than fp16, check the dataset for outliers; resume from the last checkpoint.",
                ), evidence)]
        return [Finding(
            "grad-explosion", "warning", step, f"gradient spike: grad norm {norm:.3g}, {against} (step {step})",
            lines(
                seen,
                "One spike is usually absorbed by gradient clipping; it becomes fatal if it lasts "
                f"{t.grad_patience} logged steps in a row.",
                causes,
                "What to do: keep watching the loss; if spikes recur, lower the learning rate and look for "
                "outlier examples.",
            ), evidence)]

    def _dead_lr(self, step: int, lr: float) -> list[Finding]:
        t = self.t
        dead = lr <= t.dead_lr and not self._in_warmup(step) and not self._in_tail(step)
        if dead:
            self._dead_since = step if self._dead_since is None else self._dead_since
        else:
            self._dead_since = None
        span = step - self._dead_since + 1 if self._dead_since is not None else 0
        if not self._latch["dead-lr"].update(span >= t.dead_lr_steps):
            return []
        since = self._dead_since
        return [Finding(
            "dead-lr", "warning", step, f"learning rate is {lr:g} since step {since} (step {step})",
            lines(
                f"Seen: the learning rate has been {lr:g} (<= {t.dead_lr:g}) from step {since} to step "
                f"{step}{self._schedule_note(step)}, outside the warm-up ({self.warmup_steps} steps) and the end "
                f"of the schedule; recent values {fmt_series(self.lrs)}. The weights do not change: the compute "
                "is wasted.",
                "Likely causes: a scheduler that ended before training did (max_steps vs epochs mismatch, a run "
                "resumed past its schedule); a learning rate set to 0 or far too small; a warm-up or decay "
                "misconfigured.",
                "What to do: stop the job, check learning_rate, the scheduler, warm-up and max_steps / epochs, "
                "and restart (or resume from the last checkpoint with a fixed schedule).",
            ),
            {"lr": lr, "dead_since": since, "max_steps": self.max_steps, "warmup_steps": self.warmup_steps,
             "recent_lrs": self._series(self.lrs)},
        )]

    def _overfit(self, step: int, eval_loss: float, train_loss: float, gap: float, evidence: dict,
                 severity: Severity) -> Finding:
        t = self.t
        seen = (f"Seen: at step {step}{self._schedule_note(step)} the eval loss is {eval_loss:.4g} and the mean of "
                f"the last {evidence['train_points']} train losses is {train_loss:.4g}: a val-train gap of "
                f"{gap:.3f} (< {t.overfit_watch_gap} good, {t.overfit_watch_gap}-{t.overfit_gap} watch, "
                f"> {t.overfit_gap} overfit).")
        if severity == "warning":
            return Finding(
                "overfit", "warning", step, f"overfitting: eval loss {eval_loss:.3g} is {gap:.2f} above train loss "
                f"{train_loss:.3g} (step {step})", lines(
                    seen + " The model is memorising the training examples rather than learning what "
                    "generalises.",
                    "Likely causes: too many epochs for the amount of data; too little or too repetitive data; "
                    "a LoRA rank or learning rate higher than the data supports.",
                    "What to do: use fewer epochs (or stop now); pick the checkpoint with the lowest eval loss, "
                    "not the last one; add more and more varied data; raise lora_dropout (e.g. 0.1) or weight "
                    "decay, or lower the rank.",
                ), evidence)
        return Finding(
            "overfit-watch", "info", step, f"val-train gap {gap:.2f} is in the watch band (step {step})", lines(
                seen + " Not overfitting yet, but the gap is growing beyond what is healthy.",
                "Likely causes: the model starts to memorise (many epochs over a small dataset).",
                "What to do: keep an eye on the eval loss; if the gap passes "
                f"{t.overfit_gap}, prefer the checkpoint with the lowest eval loss and train fewer epochs.",
            ), evidence)

    # --- helpers -------------------------------------------------------------------------------
    def _in_warmup(self, step: int) -> bool:
        return step <= self.warmup_steps

    def _in_tail(self, step: int) -> bool:
        if self.max_steps is None:
            return False
        tail = max(self.t.dead_lr_steps, math.ceil(self.t.dead_lr_tail_frac * self.max_steps))
        return step > self.max_steps - tail

    def _schedule_note(self, step: int | None) -> str:
        return f" of {self.max_steps}" if self.max_steps and step is not None else ""

    @staticmethod
    def _series(values) -> list[list[float]]:
        return [[s, v] for s, v in list(values)[-RECENT:]]

    def _record(self, found: list[Finding]) -> list[Finding]:
        for f in found:
            self.findings.append(f)
            if f.fatal and self.fatal is None:
                self.fatal = f
        return found
