"""The live training checker: synthetic series for every kind of finding, the written diagnosis, and the callback."""
from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import time

import pytest

from engine.train.checker import Checker
from engine.train.findings import Finding, Thresholds, write_diagnosis

MAX = 300
WARMUP = 20


def schedule_lr(step: int, peak: float = 2e-4, max_steps: int = MAX, warmup: int = WARMUP) -> float:
    """Linear warm-up then linear decay to 0 at max_steps (the trainer's default schedule)."""
    if step < warmup:
        return peak * step / warmup
    return peak * max(0.0, (max_steps - step) / (max_steps - warmup))


def healthy(step: int, rng: random.Random) -> tuple[float, float]:
    """A realistic decreasing SFT loss with batch noise, and its gradient norm."""
    loss = 0.9 + 1.8 * math.exp(-step / 60) + rng.gauss(0, 0.12)
    grad = 0.6 + 2.0 * math.exp(-step / 40) + abs(rng.gauss(0, 0.25))
    return loss, grad


def feed_healthy(checker: Checker, steps, rng: random.Random) -> list[Finding]:
    found = []
    for step in steps:
        loss, grad = healthy(step, rng)
        found += checker.observe(step, loss=loss, lr=schedule_lr(step), grad_norm=grad, now=float(step))
    return found


def kinds(found: list[Finding]) -> list[tuple[str, str]]:
    return [(f.kind, f.severity) for f in found]


# --- healthy runs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_healthy_run_raises_nothing(seed):
    rng = random.Random(seed)
    checker = Checker(Thresholds(), max_steps=MAX, warmup_steps=WARMUP)
    found = []
    for step in range(1, MAX + 1):
        loss, grad = healthy(step, rng)
        found += checker.observe(step, loss=loss, lr=schedule_lr(step), grad_norm=grad, now=float(step))
        if step % 50 == 0:  # eval a little above train: a healthy gap
            expected = 0.9 + 1.8 * math.exp(-step / 60)
            found += checker.observe_eval(step, expected + 0.12 + rng.gauss(0, 0.03), now=float(step))
    found += checker.check_stall(now=MAX + 10.0)
    assert found == [] and checker.fatal is None


def test_healthy_run_logged_every_ten_steps_raises_nothing():
    rng = random.Random(7)
    checker = Checker(max_steps=MAX, warmup_steps=0.1)  # a warm-up fraction, as TrainingArguments allows
    assert checker.warmup_steps == 30
    assert feed_healthy(checker, range(10, MAX + 1, 10), rng) == []


def test_a_memorised_loss_wiggling_near_zero_is_not_divergence():
    rng = random.Random(3)
    checker = Checker(max_steps=200)
    found = []
    for step in range(1, 201):
        loss = 3.0 * math.exp(-step / 10) + 0.01 + abs(rng.gauss(0, 0.03))  # 0.01 -> 0.08: ratios up to 8x
        found += checker.observe(step, loss=loss, lr=1e-4, grad_norm=0.05 + abs(rng.gauss(0, 0.02)))
    assert found == []


# --- NaN / Inf ------------------------------------------------------------------------------------------
def test_nan_loss_is_fatal_at_once_and_reported_once():
    rng = random.Random(1)
    checker = Checker(max_steps=MAX, warmup_steps=WARMUP)
    assert feed_healthy(checker, range(1, 31), rng) == []
    found = checker.observe(31, loss=float("nan"), lr=1e-4, grad_norm=float("nan"))
    assert kinds(found) == [("nan", "fatal")]
    assert found[0].step == 31 and "nan" in found[0].message and checker.fatal is found[0]
    assert "learning rate" in found[0].diagnosis and "bf16" in found[0].diagnosis
    assert checker.observe(32, loss=float("nan"), grad_norm=float("nan")) == []  # not repeated


def test_inf_loss_and_nan_grad_norm_behind_a_filtered_loss_are_fatal():
    checker = Checker()
    assert kinds(checker.observe(5, loss=float("inf"), lr=1e-4, grad_norm=2.0)) == [("nan", "fatal")]
    checker = Checker()
    checker.observe(1, loss=2.0, lr=1e-4, grad_norm=1.0)
    # the trainer filters a NaN loss out of its logged average (the loss reads 0); the grad norm tells
    found = checker.observe(2, loss=0.0, lr=1e-4, grad_norm=float("nan"))
    assert kinds(found) == [("nan", "fatal")] and "grad norm" in found[0].message
    assert "logging_nan_inf_filter" in found[0].diagnosis


def test_nan_eval_loss_is_fatal():
    checker = Checker()
    checker.observe(10, loss=1.0, lr=1e-4)
    assert kinds(checker.observe_eval(10, float("nan"))) == [("nan", "fatal")]


# --- divergence -----------------------------------------------------------------------------------------
def test_a_loss_that_blows_up_is_fatal_divergence_once():
    rng = random.Random(2)
    checker = Checker(max_steps=MAX, warmup_steps=WARMUP)
    assert feed_healthy(checker, range(1, 121), rng) == []
    found = []
    first = None
    for step in range(121, 200):  # lr too high after a schedule change: the loss climbs towards ln(vocab)
        loss = min(10.5, 1.2 * math.exp((step - 120) / 12)) + rng.gauss(0, 0.1)
        new = checker.observe(step, loss=loss, lr=3e-3, grad_norm=4.0 + rng.random(), now=float(step))
        if new and first is None:
            first = step
        found += new
    assert kinds(found) == [("divergence", "fatal")]
    assert 130 < first < 170
    finding = found[0]
    assert finding.evidence["ratio"] > 2.5 and finding.evidence["best_step"] <= 125
    assert "checkpoint" in finding.diagnosis and "learning rate" in finding.diagnosis


def test_one_lucky_first_batch_is_not_the_reference():
    checker = Checker(max_steps=100)
    found = checker.observe(1, loss=0.3, lr=1e-4, grad_norm=1.0)  # an easy first batch
    for step in range(2, 100):
        found += checker.observe(step, loss=2.0 - step / 200, lr=1e-4, grad_norm=1.0)
    assert found == []


# --- gradient explosion ---------------------------------------------------------------------------------
def test_one_grad_spike_is_a_warning_and_a_persistent_one_is_fatal():
    rng = random.Random(4)
    checker = Checker(max_steps=MAX, warmup_steps=WARMUP)
    assert feed_healthy(checker, range(1, 81), rng) == []
    loss, _ = healthy(81, rng)
    found = checker.observe(81, loss=loss, lr=schedule_lr(81), grad_norm=45.0)
    assert kinds(found) == [("grad-explosion", "warning")] and "median" in found[0].message
    assert feed_healthy(checker, range(82, 100), rng) == []  # clipping absorbed it
    found = []
    for step in range(100, 106):
        loss, _ = healthy(step, rng)
        found += checker.observe(step, loss=loss, lr=schedule_lr(step), grad_norm=60.0 * (step - 98))
    assert kinds(found) == [("grad-explosion", "warning"), ("grad-explosion", "fatal")]
    assert found[1].step == 102 and found[1].evidence["consecutive"] == 3 and checker.fatal is found[1]


def test_grad_norm_over_the_ceiling_counts_even_in_warm_up():
    checker = Checker(max_steps=100)
    assert kinds(checker.observe(1, loss=3.0, lr=1e-5, grad_norm=5e3)) == [("grad-explosion", "warning")]


def test_small_grad_norms_growing_after_memorisation_do_not_alert():
    checker = Checker(max_steps=100)
    found = []
    for step in range(1, 60):
        found += checker.observe(step, loss=0.05, lr=1e-4, grad_norm=0.01)
    found += checker.observe(60, loss=0.06, lr=1e-4, grad_norm=0.4)  # 40x the median, but below the floor
    assert found == []


# --- overfit --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gap,expected", [(0.2, []), (0.4, [("overfit-watch", "info")]),
                                          (0.6, [("overfit", "warning")])])
def test_val_train_gap_bands(gap, expected):
    rng = random.Random(5)
    checker = Checker(max_steps=MAX)
    for step in range(1, 101):
        checker.observe(step, loss=1.0 + rng.gauss(0, 0.03), lr=1e-4, grad_norm=1.0)
    train = sum(v for _, v in list(checker.losses)[-10:]) / 10
    found = checker.observe_eval(100, train + gap)
    assert kinds(found) == expected
    if expected:
        assert found[0].evidence["gap"] == pytest.approx(gap)
    if gap > 0.5:
        assert "fewer epochs" in found[0].diagnosis and "lowest eval loss" in found[0].diagnosis


def test_overfit_findings_fire_once_per_episode():
    checker = Checker()
    step = 0
    out = []
    for gap in (0.4, 0.45, 0.6, 0.7, 0.4, 0.2, 0.6, 0.35):
        for _ in range(10):
            step += 1
            checker.observe(step, loss=1.0, lr=1e-4)
        out.append(kinds(checker.observe_eval(step, 1.0 + gap)))
    assert out == [[("overfit-watch", "info")], [], [("overfit", "warning")], [], [], [],
                   [("overfit", "warning")], []]


def test_the_trainers_double_report_of_an_eval_counts_once():
    checker = Checker()
    checker.observe(10, loss=1.0, lr=1e-4)
    assert len(checker.observe_eval(10, 1.7)) == 1
    assert checker.observe_eval(10, 1.7) == []


# --- dead learning rate ---------------------------------------------------------------------------------
def test_lr_zero_mid_schedule_is_dead_lr_once():
    rng = random.Random(6)
    checker = Checker(max_steps=MAX, warmup_steps=WARMUP)
    found = feed_healthy(checker, range(1, 100), rng)
    for step in range(100, 140):
        loss, grad = healthy(step, rng)
        found += checker.observe(step, loss=loss, lr=0.0, grad_norm=grad)
    assert kinds(found) == [("dead-lr", "warning")]
    assert found[0].step == 109 and found[0].evidence["dead_since"] == 100


def test_lr_zero_in_the_final_steps_of_a_linear_schedule_is_fine():
    rng = random.Random(8)
    checker = Checker(max_steps=MAX, warmup_steps=WARMUP)
    found = []
    for step in range(1, MAX + 1):
        loss, grad = healthy(step, rng)
        lr = schedule_lr(step, max_steps=MAX - 20)  # reaches 0 twenty steps before the end
        found += checker.observe(step, loss=loss, lr=lr, grad_norm=grad)
    assert found == []


def test_lr_zero_during_warm_up_is_fine():
    checker = Checker(max_steps=MAX, warmup_steps=WARMUP)
    assert [f for s in range(0, 20) for f in checker.observe(s, loss=2.0, lr=0.0, grad_norm=1.0)] == []


# --- stall ----------------------------------------------------------------------------------------------
def test_stall_with_an_injected_clock():
    checker = Checker(Thresholds(stall_s=60))
    assert checker.check_stall(now=1000.0) == []  # nothing started yet
    checker.observe(5, loss=2.0, lr=1e-4, now=0.0)
    assert checker.check_stall(now=59.0) == []
    found = checker.check_stall(now=61.0)
    assert kinds(found) == [("stall", "warning")] and found[0].step == 5 and "61 s" in found[0].message
    assert checker.check_stall(now=120.0) == []  # the same stall is reported once
    checker.touch(6, now=130.0)
    assert checker.check_stall(now=189.0) == []
    assert kinds(checker.check_stall(now=191.0)) == [("stall", "warning")]


# --- the written record ---------------------------------------------------------------------------------
def test_write_diagnosis_appends_a_readable_section_and_a_json_line(tmp_path):
    checker = Checker(max_steps=100)
    checker.observe(1, loss=2.0, lr=1e-4, grad_norm=1.0)
    nan = checker.observe(2, loss=float("nan"), lr=1e-4, grad_norm=float("nan"))[0]
    path = write_diagnosis(tmp_path, nan)
    stall = Checker(Thresholds(stall_s=1), now=0.0).check_stall(now=5.0)[0]
    assert write_diagnosis(tmp_path, stall) == path == tmp_path / "diagnosis.md"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# Training diagnosis") and text.count("# Training diagnosis") == 1
    assert "## FATAL nan at step 2" in text and nan.message in text and "lower the learning rate" in text
    assert "## WARNING stall" in text and "- recent_losses: 2 @ step 1" in text
    lines = (tmp_path / "alerts.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["kind"], r["severity"], r["step"]) for r in records] == [("nan", "fatal", 2), ("stall", "warning", None)]
    assert records[0]["evidence"]["loss"] == "nan" and records[0]["diagnosis"] == nan.diagnosis


def test_checker_imports_no_ml_stack_or_qt():
    code = ("import sys, engine.train.checker; bad = [m for m in ('torch', 'transformers', 'PySide6') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- the callback (real transformers TrainerState / TrainerControl, no Trainer) -------------------------
class FakeServer:
    """A fake EngineServer: records the bodies emitted instead of sending them."""

    def __init__(self) -> None:
        self.bodies = []

    def emit(self, body, reply_to=None):
        self.bodies.append(body)

    def alerts(self):
        return [b for b in self.bodies if type(b).__name__ == "Alert"]


def test_callback_alerts_writes_the_diagnosis_and_stops_on_nan(tmp_path):
    from transformers import TrainerControl, TrainerState

    from engine.train.checker_callback import CheckerCallback

    server = FakeServer()
    callback = CheckerCallback(server, Checker(Thresholds(stall_s=0.3)), tmp_path, watchdog_interval_s=0.05)
    state, control = TrainerState(max_steps=100, global_step=0), TrainerControl()
    callback.on_train_begin(None, state, control)
    assert callback.checker.max_steps == 100
    for step in range(1, 11):
        state.global_step = step
        callback.on_step_end(None, state, control)
        callback.on_log(None, state, control, logs={"loss": 2.0 - step / 20, "learning_rate": 1e-4,
                                                    "grad_norm": 1.0})
    assert server.alerts() == [] and not control.should_training_stop

    state.global_step = 11
    control.should_save = True  # a scheduled save at this step must not happen
    callback.on_log(None, state, control, logs={"loss": 0.0, "learning_rate": 1e-4, "grad_norm": float("nan")})
    [alert] = server.alerts()
    assert alert.kind == "nan" and alert.step == 11 and "grad norm" in alert.message
    assert alert.severity == "fatal"
    assert control.should_training_stop and not control.should_save
    assert callback.fatal is not None and callback.fatal.kind == "nan"
    assert "FATAL nan" in (tmp_path / "diagnosis.md").read_text()
    assert json.loads((tmp_path / "alerts.jsonl").read_text())["kind"] == "nan"
    assert alert.diagnosis_path == str(tmp_path / "diagnosis.md")

    # evaluations reach the checker once (the trainer reports each through on_log and on_evaluate)
    callback.on_log(None, state, control, logs={"eval_loss": 2.4})
    callback.on_evaluate(None, state, control, metrics={"eval_loss": 2.4})
    assert [a.kind for a in server.alerts()] == ["nan", "overfit"]

    # the watchdog reports a stall, then stops with training
    deadline = time.monotonic() + 3
    while "stall" not in [a.kind for a in server.alerts()] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [a.kind for a in server.alerts()].count("stall") == 1
    watchdog = callback._watchdog
    callback.on_train_end(None, state, control)
    assert watchdog is not None and not watchdog.is_alive()


def test_nan_fault_injection_is_parsed_and_poisons_one_trainable_parameter(monkeypatch):
    import torch

    from engine.train.checker_callback import CheckerCallback, _fault_step

    assert _fault_step("nan_loss@7") == 7 and _fault_step("") is None and _fault_step("nan_loss@x") is None
    monkeypatch.setenv("NIGHTSCHOOL_FAULT", "nan_loss@3")
    from transformers import TrainerControl, TrainerState

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    model[0].weight.requires_grad_(False)
    callback = CheckerCallback(FakeServer(), Checker(), "/nonexistent")
    state = TrainerState(max_steps=10, global_step=2)
    callback.on_step_end(None, state, TrainerControl(), model=model)
    assert not any(torch.isnan(p).any() for p in model.parameters())
    state.global_step = 3
    callback.on_step_end(None, state, TrainerControl(), model=model)
    assert torch.isnan(model[0].bias).all() and not torch.isnan(model[1].weight).any()
    assert torch.isnan(model(torch.ones(1, 2))).all()
