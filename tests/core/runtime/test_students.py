"""Choosing the student: what fits a machine (by its memory and GPUs), and a cycle's time from the speed measured on
this machine — a real measuring job on the tiny model — never from a made-up rate."""
from __future__ import annotations

import json

import pytest

from app.core.queue.scheduler import Queue
from app.core.runtime.school import students
from app.core.runtime.school.facade import School
from app.core.runtime.school.students import CATALOG, Machine, Rate, how_it_trains
from app.core.train.spec import DEFAULT_MODEL
from tests.core.queue.test_queue import run_until

LAPTOP = Machine(cores=4, ram_gb=16)
BY_PARAMS = {s.params_m: s for s in CATALOG}


def test_a_cpu_machine_is_offered_small_students_and_a_gpu_the_size_its_memory_allows():
    assert how_it_trains(BY_PARAMS[135], LAPTOP)[0] == "lora"
    assert how_it_trains(BY_PARAMS[362], LAPTOP)[0] == "lora"
    method, why = how_it_trains(BY_PARAMS[1711], LAPTOP)
    assert method is None and "RAM" in why  # 1.7B needs more than a 16 GiB laptop has
    assert how_it_trains(BY_PARAMS[494], Machine(4, 64))[0] is None  # fits the RAM, but is GPU-class on a CPU

    small_gpu = Machine(8, 32, (("RTX 4060", 8.0),))
    assert how_it_trains(BY_PARAMS[1544], small_gpu)[0] == "lora"
    method, why = how_it_trains(BY_PARAMS[3086], small_gpu)
    assert method == "qlora" and "4-bit" in why  # bf16 would not fit 8 GiB
    assert how_it_trains(BY_PARAMS[7616], small_gpu)[0] is None
    assert how_it_trains(BY_PARAMS[7616], Machine(16, 128, (("H100", 80.0),)))[0] == "lora"


def test_no_time_is_shown_without_a_measurement_and_a_neighbour_is_scaled_by_parameters(store, monkeypatch):
    found, _ = students.offers(store, LAPTOP, DEFAULT_MODEL, 0, 1024)
    assert all(o.cycle_s is None and o.evidence == "not measured here yet" for o in found)

    monkeypatch.setattr(students, "measured", lambda _store, model: Rate(400.0, 3, model) if model == DEFAULT_MODEL
                        else None)
    found, tokens_from = students.offers(store, LAPTOP, DEFAULT_MODEL, 0, 1024)
    tokens = students.NOMINAL_STEPS * 16 * 1024
    by_ref = {o.student.ref: o for o in found}
    own, bigger = by_ref[DEFAULT_MODEL], by_ref["HuggingFaceTB/SmolLM2-360M-Instruct"]
    assert own.current and own.cycle_s == pytest.approx(tokens / 400.0) and "3 finished jobs" in own.evidence
    assert bigger.tokens_per_s == pytest.approx(400.0 * 135 / 362) and "scaled by parameters" in bigger.evidence
    assert "no cycle has trained yet" in tokens_from


def test_a_measuring_job_gives_the_current_student_its_cycle_time(store, tiny_model):
    school = School(store)
    school.set_policy("base_model", str(tiny_model))
    school.set_policy("max_length", 128)
    queued = school.measure(str(tiny_model))
    queue = Queue(store, inbox=False)
    assert queue.manager.job(queued["job"]).source == students.MEASURE_SOURCE
    run_until(queue, lambda: queue.manager.job(queued["job"]).state in ("completed", "failed"), "the measuring job")
    assert queue.manager.job(queued["job"]).state == "completed", queue.manager.job(queued["job"]).error
    run = queue.manager.latest_run(queued["job"])
    rate = json.loads(run.result_json)["metrics"]["tokens_per_s"]

    out = school.students(Machine(2, 24))
    mine = next(o for o in out["students"] if o["current"])
    assert mine["base_model"] == str(tiny_model) and mine["tokens_per_s"] == pytest.approx(rate)
    assert mine["cycle_training_s"] == pytest.approx(students.NOMINAL_STEPS * 16 * 128 / rate)
    assert out["machine"] == "2 cores, 24 GiB RAM, no NVIDIA GPU"
