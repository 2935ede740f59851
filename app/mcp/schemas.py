"""The MCP tools' typed results (their JSON schemas are the tools' output schemas). They mirror the dicts the School
facade returns; keys the facade adds later pass through (extra="allow") until they are named here."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.core.runtime.school.policy import Policy


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Runtime(Open):
    role: str = Field(description="the process that runs the school: the window or the daemon")
    pid: int
    started: float | None = Field(None, description="the process's start time (seconds since the epoch)")


class Served(Open):
    url: str | None = Field(None, description="the built-in OpenAI-compatible server's base URL")
    model: str | None = None
    sha256: str | None = None
    parked: bool = Field(False, description="unloaded for now to free memory for training")


class Deployment(Open):
    id: int
    sha256: str | None = None
    file: str | None = None
    note: str | None = None


class Student(Open):
    base_model: str
    deployed_checkpoint: int | None = Field(None, description="the checkpoint id the student runs (None: the base)")
    deployed_label: str
    served: Served | None = Field(None, description="what the built-in server serves; None when it is stopped")
    deployment: Deployment | None = None


class Next(Open):
    new_sessions: int = Field(description="sessions new for the school: captured root sessions no cycle of this base "
                                          "model trained on yet (held-out and bad ones aside)")
    meaning: str = Field("", description="what new_sessions counts, in words")
    needed: int = Field(description="sessions a scheduled cycle waits for")
    window: str = Field(description="the local time window cycles may start in ('any': always)")
    next_window: str | None = None
    waiting: list[str] = Field(description="why the next cycle has not started yet (empty: nothing holds it)")


class Cycle(Open):
    id: int
    base_model: str
    stage: str = Field(description="building, training, refining, judging, exporting or deploying")
    state: str = Field(description="running, approval (waits for approve/refuse_deployment), done, refused, failed")
    trigger: str = ""
    inputs: dict[str, Any] = Field(default_factory=dict)
    outputs: dict[str, Any] = Field(default_factory=dict)
    times: dict[str, Any] = Field(default_factory=dict)
    starts: dict[str, Any] = Field(default_factory=dict)
    resumes: dict[str, Any] = Field(default_factory=dict)
    reason: str = ""
    report: dict[str, Any] = Field(default_factory=dict)
    started_at: str | None = None
    updated_at: str | None = None
    ended_at: str | None = None


class Status(Open):
    runtime: Runtime | None = Field(description="the running school; None when neither window nor daemon runs")
    paused: bool
    policy: Policy
    student: Student
    next: Next
    cycle: Cycle | None = Field(description="the current cycle (running or waiting for approval)")
    last: Cycle | None = Field(description="the last cycle that ended")
    blind: list[dict[str, Any]] = Field(default_factory=list, description="the blind test's results per model "
                                                                          "(as `blind_results` gives them)")


class History(BaseModel):
    cycles: list[Cycle] = Field(description="newest first")


class Checkpoint(Open):
    id: int | None
    label: str
    base_model: str
    adapter: str | None = None
    passed_gate: bool


class Checkpoints(BaseModel):
    checkpoints: list[Checkpoint]


class Evaluation(Open):
    eval: int = Field(description="the evaluation's id")
    label: str
    metrics: dict[str, float | None]
    contexts: int


class BlindResult(Open):
    model: str = Field(description="the model tested, as the Judge tab names it ('base' or '#ID job step')")
    base_model: str
    checkpoint_id: int | None = Field(None, description="the checkpoint tested (None: the base model)")
    judge: str = Field(description="who answered: person or teacher")
    trials: int = Field(description="answered trials")
    indistinguishable: int = Field(description="answered trials whose pick was wrong or 'can't tell'")
    share: float | None = Field(None, description="indistinguishable / trials (None: none answered)")
    low: float | None = Field(None, description="the 95 % interval's low end, sessions resampled (None: under two "
                                                "sessions)")
    high: float | None = None
    sessions: int = Field(description="held-out sessions the answered trials come from")
    tests: int
    unanswered: int = Field(description="trials shown in a test but not answered yet")
    goal: float = Field(description="the product's target: a share above it")
    chance: float = Field(description="the share of a judge who guesses")


class BlindResults(BaseModel):
    results: list[BlindResult] = Field(description="per model and judge, the model tested last first")


class Started(Open):
    cycle: int = Field(description="the cycle's id: follow it with `status` (cycle.id)")
    created: bool = Field(description="false when a cycle was already running and this is its id")
    stage: str
    runtime: bool = Field(description="whether a runtime runs on this data dir to carry the cycle on")
    note: str = ""


class Answer(BaseModel):
    answer: str


class Mark(Open):
    session: str
    weight: float = Field(description="the session's weight in the next dataset: 2 good, 0 left out")


class Feedback(Open):
    """An experience after the client's feedback (without its request and answer)."""

    id: str = Field(description="the experience's id (the X-Nightschool-Experience header of the answer)")
    state: str = Field(description="recorded, flagged (waits for a correction) or corrected")
    feedback: str | None = Field(None, description="up or down")
    reasons: list[dict[str, str]] = Field(default_factory=list, description="why it needs improvement: {kind, text}")
    corrections: list[dict[str, Any]] = Field(default_factory=list,
                                              description="its corrections: state (accepted, waiting, rejected), "
                                                          "reason, source")


class ExperienceSummary(Open):
    enabled: bool = Field(description="whether the built-in server records what it answers (off by default)")
    total: int = Field(description="entries in the buffer")
    by_state: dict[str, int] = Field(description="entries per state: recorded, flagged, corrected")
    by_reason: dict[str, int] = Field(description="flagged entries per reason: invalid_tool_call, rambled, empty, "
                                                  "client, contradicted")
    corrections: dict[str, int] = Field(description="corrections per state: waiting, accepted, rejected")


class TeamStatus(Open):
    school: dict[str, Any] = Field(description="the team school's status, as `status` gives it on the team's server")
    sessions_per_member: dict[str, int] = Field(description="top-level sessions each member shipped")
    members: int = Field(description="invited members (revoked ones too)")
    deployed: dict[str, Any] | None = Field(None, description="the deployed student: model, checkpoint_id (null: "
                                                              "the base model), since, action, verdict")
    last_verdict: dict[str, Any] | None = Field(None, description="the last ended cycle: cycle, state, verdict, "
                                                                  "reasons, ended_at")
