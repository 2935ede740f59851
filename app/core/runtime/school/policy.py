"""When the school learns and what it does with the result: the cycle policy, stored in settings, validated per key."""
from __future__ import annotations

import json
import re
from datetime import datetime, time, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from app.core.base import settings
from app.core.base.store import Store
from app.core.train.backends import BACKENDS
from app.core.train.variants import DEFAULT as DEFAULT_VARIANT, VARIANTS

KEY = "school.policy"
PAUSED_KEY = "school.paused"
_WINDOW = re.compile(r"^(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})$")


class PolicyError(settings.SettingError):
    """A policy value that cannot be used; names the key and the accepted values."""


class Policy(BaseModel):
    """What starts a cycle, how it is refined and what happens with a model that passes the gate."""

    min_sessions: int = Field(50, ge=0, description="new usable sessions since the last cycle that start one")
    window: str = Field("02:00-06:00", description="the time of day a cycle may start in, local time (it may wrap "
                                                   "midnight)")
    cooldown_min: float = Field(60.0, ge=0, description="minutes between the end of a cycle and the next start")
    deploy: Literal["auto", "ask", "never"] = Field(
        "auto", description="what happens to a model that passes the gate: deployed, deployed once you approve, "
                            "or kept")  # the gate weighs evidence: only a significant gain passes
    refine_every: int = Field(2, ge=0, description="every k-th cycle refines the model after SFT (0: never)")
    refine: Literal["preference", "rl"] = Field(
        "preference", description="how a cycle refines: preference pairs mined from the student's answers, or RL")
    on_battery: bool = Field(False, description="whether a cycle may start on battery power")
    max_load: float = Field(0.8, gt=0, description="1-minute load average per core above which the machine is busy "
                                                   "and no cycle starts")
    free_served: Literal["gpu", "always", "never"] = Field(
        "gpu", description="when the served model is unloaded while training: on a GPU machine, always, or never")
    training_peak_mb: int = Field(0, ge=0, description="the training job's expected peak RAM in MB (0: estimate it)")
    max_steps: int = Field(0, ge=0, description="training steps per cycle (0: the recipe's plan)")
    train_minutes: float = Field(0.0, ge=0, description="minutes a cycle's training may run at most (0: until the "
                                                        "window closes, less the time to judge and export)")
    max_length: int = Field(2048, ge=64, description="tokens per training window of the cycle's dataset")
    near_duplicate: float = Field(0.85, ge=0.0, le=1.0, description="how similar (MinHash) two sessions must be to "
                                                                    "count as one (0: off)")
    test_share: float = Field(0.1, ge=0.0, lt=0.5, description="the share of new sessions each build holds out for "
                                                               "judging, for ever")
    judge_with: Literal["auto", "llama.cpp", "transformers"] = Field(
        "auto", description="how a cycle judges: llama.cpp on an f16 GGUF (minutes on a CPU), transformers (the "
                            "reference), or auto: transformers on a GPU machine, llama.cpp otherwise")
    judge_examples: int = Field(0, ge=0, description="held-out examples the loss is measured on in each evaluation "
                                                     "(0: auto, 64 on a CPU, 200 with a GPU)")
    judge_contexts: int = Field(0, ge=0, description="held-out next actions generated and judged in each evaluation "
                                                     "(0: auto, 96 on a CPU, 200 with a GPU)")
    train_on: Literal[("default", *BACKENDS)] = Field(  # "default", then the backends registry's names
        "default", description="where a cycle's training jobs run: here, a Ray cluster, a SkyPilot managed job, or "
                               "default: the queue's `train.backend` setting (nightschool queue remote)")
    quant: str = Field("q4_k_m", description="the quantization of the exported GGUF that is served")
    port: int = Field(8765, ge=0, le=65535, description="the port the deployed student is served on (0: any free "
                                                        "port)")
    base_model: str = Field("default", description="the model the student starts from ('default': the embedded "
                                                   "SmolLM2-135M-Instruct; a folder or a hub id)")
    hyper: dict[str, Any] = Field(default_factory=dict, description="hyper-parameters of the cycle's jobs over the "
                                                                    "recipe's")
    recipe: str = Field(DEFAULT_VARIANT, description="the named recipe a cycle's SFT trains with: "
                                                     + ", ".join(VARIANTS))

    @field_validator("hyper")
    @classmethod
    def _hyper(cls, value: dict) -> dict:
        from app.core.train.spec import Hyper

        try:
            Hyper(**value)  # unknown names and bad values are refused here, not in a job at 2 a.m.
        except ValidationError as exc:
            raise ValueError(settings.plain_reason(exc)) from None
        return value

    @field_validator("recipe")
    @classmethod
    def _recipe(cls, value: str) -> str:
        if value not in VARIANTS:
            raise ValueError(f"there is no recipe {value!r}")
        return value

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        if value != "any" and window_bounds(value) is None:  # the fix says what a window is: the why, what is wrong
            raise ValueError("an hour is 0-23 (24 may end a window) and a minute 0-59" if _WINDOW.match(value.strip())
                             else "it is not two times of day joined by a dash")
        return value


def window_bounds(text: str) -> tuple[time, time] | None:
    match = _WINDOW.match(text.strip())
    if not match:
        return None
    h1, m1, h2, m2 = map(int, match.groups())
    if h1 > 23 or h2 > 24 or m1 > 59 or m2 > 59:
        return None
    return time(h1, m1), time(0, 0) if h2 == 24 else time(h2, m2)


def in_window(policy: Policy, now: datetime) -> bool:
    if policy.window == "any":
        return True
    start, end = window_bounds(policy.window)
    t = now.time()
    return start <= t < end if start < end else (t >= start or t < end)


def next_window(policy: Policy, now: datetime) -> datetime | None:
    """When the window next opens (None when it is open or always open)."""
    if in_window(policy, now):
        return None
    start, _ = window_bounds(policy.window)
    at = now.replace(hour=start.hour, minute=start.minute, second=0, microsecond=0)
    return at if at > now else at + timedelta(days=1)


def judge_settings(policy: Policy, **explicit):
    """The settings a judgement uses here under this policy (judge_with, judge_examples, judge_contexts), the same for
    a cycle, `nightschool promote | compare` and the Judge tab; `explicit`: EvalSettings fields a person named (None:
    not named). The machine's part: judge/promote.settings_here."""
    from app.core.judge.promote import settings_here

    return settings_here(policy.judge_with, policy.judge_examples, policy.judge_contexts, **explicit)


WORDS = {"window": "HH:MM-HH:MM (e.g. 02:00-06:00) or any",
         "recipe": "; ".join(f"{v.name} ({v.words})" for v in VARIANTS.values()),
         "hyper": 'a JSON object of hyper-parameters, e.g. {"learning_rate": 2e-4, "max_length": 1024}'}


def load(store: Store) -> Policy:
    return settings.load_model(store, KEY, Policy)


def accepted(key: str) -> str:
    """The values a key accepts, in words."""
    return settings.accepted(Policy, key, WORDS)


def meaning(key: str) -> str:
    """What a key means, in a line (its description beside its definition above)."""
    info = Policy.model_fields.get(key)
    return info.description or "" if info is not None else ""


def set_value(store: Store, key: str, raw: Any) -> Policy:
    """Change one key (raw may be text from a command line); a bad key or value is refused with what is accepted."""
    if isinstance(raw, str) and key == "hyper":
        try:
            raw = json.loads(raw)
        except ValueError:
            pass
    return settings.set_field(store, KEY, Policy, key, raw, PolicyError, WORDS)


def paused(store: Store) -> bool:
    return bool(settings.get(store, PAUSED_KEY, False))


def set_paused(store: Store, value: bool) -> None:
    settings.put(store, PAUSED_KEY, bool(value))
