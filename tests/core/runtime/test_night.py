"""How long a cycle trains: until its window closes less the time to judge and export (measured in the last cycle
that did, else a default for the machine), capped by the policy's train_minutes, at least the minimum; said in words
by `school status` and the School tab."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from app.core.runtime.school import cycles, night
from app.core.runtime.school.facade import School
from app.core.runtime.school.policy import Policy

TZ = timezone(timedelta(hours=1))


def at(hour: int, minute: int = 0, day: int = 28) -> datetime:
    return datetime(2026, 11, day, hour, minute, tzinfo=TZ)


def test_inside_the_window_it_trains_until_the_close_less_the_default_reserve(store):
    got = night.plan(Policy(window="02:00-06:00"), store, now=at(2, 30), gpu=False)
    assert got.minutes == pytest.approx(210 - night.RESERVE_MIN["cpu"])
    assert got.ends_at == at(2, 30) + timedelta(minutes=180)
    assert "until the window closes at 06:00" in got.why and "none measured here yet" in got.why
    gpu = night.plan(Policy(window="02:00-06:00"), store, now=at(2, 30), gpu=True)
    assert gpu.minutes == pytest.approx(210 - night.RESERVE_MIN["gpu"])


def test_the_reserve_is_what_judging_and_exporting_took_last_time(store):
    done = cycles.create(store, "default", "test", {})
    for stage, seconds in (("judging", 600), ("exporting", 240), ("deploying", 60)):
        done = cycles.update(store, done.id, times={**done.times, stage: {"seconds": seconds}})
    got = night.plan(Policy(window="02:00-06:00"), store, now=at(2), gpu=False)
    assert got.minutes == pytest.approx(240 - 15 * night.MARGIN)
    assert f"took 15 min in cycle {done.id}" in got.why


def test_a_window_that_wraps_midnight_ends_the_next_day(store):
    got = night.plan(Policy(window="22:00-02:00"), store, now=at(23), gpu=False)
    assert got.minutes == pytest.approx(180 - 30) and "02:00" in got.why


def test_the_policy_caps_it_and_the_minimum_holds_near_the_close(store):
    capped = night.plan(Policy(window="02:00-06:00", train_minutes=45), store, now=at(2), gpu=False)
    assert capped.minutes == 45 and "train_minutes (45)" in capped.why and "would allow 210" in capped.why
    late = night.plan(Policy(window="02:00-06:00"), store, now=at(5, 50), gpu=False)
    assert late.minutes == night.MIN_TRAIN_MIN and "too soon" in late.why


def test_without_a_window_or_outside_it_the_policy_or_the_default_bounds_it(store):
    anytime = night.plan(Policy(window="any"), store, now=at(14), gpu=False)
    assert anytime.minutes == night.DEFAULT_MIN and "no window bounds it" in anytime.why
    by_hand = night.plan(Policy(window="02:00-06:00", train_minutes=90, max_steps=40), store, now=at(14), gpu=False)
    assert by_hand.minutes == 90 and "started outside the window" in by_hand.why and "after 40 steps" in by_hand.why


def test_status_and_the_school_tab_say_how_long_the_next_cycle_trains(store):
    from app.ui.school.words import next_state

    school = School(store)
    school.set_policy("window", "any")
    school.set_policy("train_minutes", 50)
    status = school.status()
    assert status["next"]["training"]["minutes"] == 50
    assert any(line.startswith("Trains up to 50 min: the policy's train_minutes (50)")
               for line in next_state(status)[2])
