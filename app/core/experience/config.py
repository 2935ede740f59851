"""The experience buffer's and the teacher's settings (store keys `experience` and `teacher`), validated per key."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from app.core.base import settings
from app.core.base.store import Store

BUFFER_KEY, TEACHER_KEY = "experience", "teacher"


class BufferConfig(BaseModel):
    """Whether the built-in server records what it answers, and how much it keeps."""

    enabled: bool = False  # opt-in: nothing is recorded until the user turns it on
    max_rows: int = Field(20000, ge=1)  # the oldest entries beyond this are deleted
    max_age_days: float = Field(30.0, gt=0)  # entries older than this are deleted
    require_review: bool = False  # a correction trains only after a person accepts it


class TeacherConfig(BaseModel):
    """The model that re-answers what the student got wrong: any OpenAI-compatible chat API, and its limits."""

    url: str = ""  # base URL of an OpenAI-compatible API, e.g. https://api.openai.com/v1 or http://127.0.0.1:8080/v1
    model: str = ""  # the model name the API expects
    cooldown_min: float = Field(60.0, ge=0)  # minutes before an entry that failed is tried again
    batch_per_cycle: int = Field(20, ge=0)  # entries re-answered per cycle (or per `correct-now`)
    tokens_per_day: int = Field(200_000, ge=0)  # prompt + completion tokens the teacher may use per local day
    max_tokens: int = Field(1024, ge=16)  # the longest correction asked for
    min_score: float = Field(0.7, ge=0.0, le=1.0)  # a correction scoring below this is rejected
    timeout_s: float = Field(60.0, gt=0)
    price_in: float = Field(0.0, ge=0)  # cost per million prompt tokens (for the shown cost; 0: not priced)
    price_out: float = Field(0.0, ge=0)  # cost per million completion tokens


def buffer(store: Store) -> BufferConfig:
    return settings.load_model(store, BUFFER_KEY, BufferConfig)


def teacher(store: Store) -> TeacherConfig:
    return settings.load_model(store, TEACHER_KEY, TeacherConfig)


def set_buffer(store: Store, field: str, raw: Any) -> BufferConfig:
    return settings.set_field(store, BUFFER_KEY, BufferConfig, field, raw)


def set_teacher(store: Store, field: str, raw: Any) -> TeacherConfig:
    return settings.set_field(store, TEACHER_KEY, TeacherConfig, field, raw)
