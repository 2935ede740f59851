"""The engine <-> client protocol: versioned, length-prefixed JSON envelopes. Both sides import this module.

Frame: 4-byte big-endian length + UTF-8 JSON (``allow_nan=False``; a NaN metric travels as null and is
named in ``nonfinite``). Envelope: ``{"v", "type", "id", "ts", "job", "seq", "reply_to", "body"}``.
The client's first frame is ``hello`` with the job's token; the engine answers ``hello`` and then streams.
"""
from __future__ import annotations

import asyncio
import json
import math
import socket
import struct
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.core.base.errors import Explained

PROTOCOL_MAJOR = 1
PROTOCOL_MINOR = 4  # 1: `built` and `report` (dataset workers); 2: alert severity + diagnosis, result lineage,
# `plan` (dry run), metrics rewards, state `resuming`; 3: `evaluated` (evaluation worker); 4: `exported` (export worker)
MAX_FRAME = 4 * 1024 * 1024  # bytes of JSON in one frame
HEADER = struct.Struct(">I")


class ProtocolError(Explained):
    """A frame or message that breaks the protocol."""


class FrameTooLarge(ProtocolError):
    """A frame whose declared or encoded size is over MAX_FRAME."""


class VersionMismatch(ProtocolError):
    """The peer speaks another major version."""


class AuthError(ProtocolError):
    """The client's hello carried no token or the wrong one."""


class Body(BaseModel):
    """Base of all bodies: unknown fields are ignored (forward compatible)."""

    model_config = ConfigDict(extra="ignore")


# --- both directions -------------------------------------------------------------------------
class Hello(Body):
    role: Literal["client", "engine"] = "client"
    token: str = ""
    minor: int = PROTOCOL_MINOR
    since_seq: int = 0  # client: replay events with seq > since_seq
    pid: int | None = None  # engine: its pid
    kind: str | None = None  # engine: the job kind


# --- engine -> client ------------------------------------------------------------------------
class State(Body):
    state: Literal["starting", "loading", "resuming", "running", "paused", "stopping", "saving", "completed", "stopped",
                   "failed"]
    detail: str = ""


class Progress(Body):
    step: int
    total: int
    epoch: float | None = None
    eta_s: float | None = None
    elapsed_s: float | None = None
    phase: str = "train"  # train | load_model | materialise


class Metrics(Body):
    step: int
    loss: float | None = None
    eval_loss: float | None = None
    lr: float | None = None
    grad_norm: float | None = None
    tokens_per_s: float | None = None
    ram_mb: float | None = None
    vram_mb: float | None = None
    vram_total_mb: float | None = None
    gpu_util: float | None = None
    reward: float | None = None  # RL recipes: mean reward of the step's completions
    rewards: dict[str, float] = Field(default_factory=dict)  # RL: per reward component
    margin: float | None = None  # preference recipes: chosen − rejected implicit reward (TRL rewards/margins)
    accuracy: float | None = None  # preference recipes: share of pairs ranked right (TRL rewards/accuracies)
    nonfinite: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _nan_to_null(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        flagged = list(data.get("nonfinite") or [])
        for key, value in list(data.items()):
            if isinstance(value, float) and not math.isfinite(value):
                data[key] = None
                flagged.append(key)
        data["nonfinite"] = sorted(set(flagged))
        return data


class Log(Body):
    level: Literal["debug", "info", "warning", "error"] = "info"
    message: str


class Alert(Body):
    kind: str  # nan | divergence | grad-explosion | overfit | overfit-watch | dead-lr | stall | budget
    message: str
    step: int | None = None
    severity: Literal["info", "warning", "fatal"] = "warning"  # fatal: the run was stopped
    diagnosis_path: str | None = None  # the run's diagnosis.md (what was seen, causes, what to do)


class Checkpoint(Body):
    step: int
    path: str
    reason: str = "scheduled"  # scheduled | requested | stop | final


class Result(Body):
    job_id: str
    status: Literal["completed", "stopped"]
    adapter_path: str
    adapter_sha256: str
    spec_sha256: str
    dataset_sha256: str
    base_model: str
    metrics: dict[str, float | int | None] = Field(default_factory=dict)
    recipe: str = "sft"
    method: str = "lora"  # lora | qlora | full (then adapter_path holds the whole model)
    stop_reason: str = ""  # why a `stopped` run stopped: user | budget: … 
    best_checkpoint: str | None = None  # by eval loss, when there was eval data
    resumed_from: list[int] = Field(default_factory=list)  # checkpoint steps this run resumed from
    config_fingerprint: str = ""
    code_hash: str = ""


class Plan(Body):
    """A dry run's verdict: the spec is valid (or not) and what training it would do."""

    ok: bool
    recipe: str
    examples: int
    eval_examples: int = 0
    steps: int = 0
    tokens: int = 0  # tokens the plan would train on (examples x epochs, capped by the steps)
    eta_s: float | None = None
    problems: list[str] = Field(default_factory=list)


class Built(Body):
    """A dataset build (or preference-pair) worker finished: where the dataset is and what it holds."""

    name: str
    path: str  # the build directory (the caller validates its manifest before registering it)
    manifest_sha256: str
    fingerprint: str
    examples: int


class Evaluated(Body):
    """An evaluation worker finished: where its report is (report.json + generations.jsonl) and the headline numbers."""

    label: str
    path: str
    report_sha256: str
    metrics: dict[str, float | None] = {}
    contexts: int = 0


class Exported(Body):
    """An export worker finished: its folder, each GGUF with its smoke test, the LoRA GGUF, the embedded template."""

    label: str
    path: str
    files: list[dict[str, Any]] = Field(default_factory=list)  # quant, file, sha256, size, smoke results
    lora_file: str | None = None
    template_sha256: str = ""
    stop: list[str] = Field(default_factory=list)
    eos_token: str = ""
    bos_token: str = ""
    template: str = ""


class Report(Body):
    """A validation worker finished: what it checked and every problem found (example, check, detail)."""

    target: str
    checked: int
    problems: list[dict[str, Any]] = Field(default_factory=list)


class Error(Body):
    message: str  # what happened
    why: str = ""  # why it happened
    fix: str = ""  # what to do
    traceback: str = ""


class Ack(Body):
    command: str
    ok: bool = True
    detail: str = ""


class Pong(Body):
    state: str = ""


# --- client -> engine ------------------------------------------------------------------------
class Pause(Body):
    pass


class Resume(Body):
    pass


class Stop(Body):
    pass


class CheckpointNow(Body):
    pass


class Ping(Body):
    pass


REGISTRY: dict[str, type[Body]] = {
    "hello": Hello, "state": State, "progress": Progress, "metrics": Metrics, "log": Log, "alert": Alert,
    "checkpoint": Checkpoint, "result": Result, "plan": Plan, "built": Built, "evaluated": Evaluated,
    "exported": Exported, "report": Report, "error": Error, "ack": Ack, "pong": Pong,
    "pause": Pause, "resume": Resume, "stop": Stop, "checkpoint_now": CheckpointNow, "ping": Ping,
}
TYPE_OF: dict[type[Body], str] = {cls: name for name, cls in REGISTRY.items()}
COMMANDS = frozenset({"pause", "resume", "stop", "checkpoint_now", "ping"})
TERMINAL_STATES = frozenset({"completed", "stopped", "failed"})


class Envelope(BaseModel):
    """One message. ``body`` is the typed body for known types, a plain dict for unknown ones."""

    model_config = ConfigDict(extra="ignore", arbitrary_types_allowed=True)
    v: int = PROTOCOL_MAJOR
    type: str
    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    ts: float = Field(default_factory=time.time)
    job: str | None = None
    seq: int | None = None
    reply_to: str | None = None
    body: Any = None

    @property
    def known(self) -> bool:
        return self.type in REGISTRY


def make(body: Body, job: str | None = None, **fields: Any) -> Envelope:
    """Wrap a body in an envelope of its registered type."""
    return Envelope(type=TYPE_OF[type(body)], body=body, job=job, **fields)


def to_dict(env: Envelope) -> dict[str, Any]:
    body = env.body.model_dump(mode="json") if isinstance(env.body, Body) else (env.body or {})
    return {"v": env.v, "type": env.type, "id": env.id, "ts": env.ts, "job": env.job, "seq": env.seq,
            "reply_to": env.reply_to, "body": body}


def from_dict(data: Any) -> Envelope:
    """Parse an envelope; a major-version mismatch or a malformed known body raises ProtocolError."""
    if not isinstance(data, dict) or "type" not in data:
        raise ProtocolError("a message must be a JSON object with a 'type'")
    v = data.get("v")
    if v != PROTOCOL_MAJOR:
        raise VersionMismatch(f"peer speaks protocol v{v}, this side speaks v{PROTOCOL_MAJOR}: "
                              "update Nightschool so the app and the engine are the same version")
    body_cls = REGISTRY.get(data["type"])
    raw_body = data.get("body") or {}
    try:
        body = body_cls.model_validate(raw_body) if body_cls else raw_body
        fields = {k: data[k] for k in ("id", "ts", "job", "seq", "reply_to") if data.get(k) is not None}
        return Envelope(v=v, type=data["type"], body=body, **fields)
    except ValidationError as exc:
        raise ProtocolError(f"malformed '{data['type']}' message: {exc.errors()[0]['msg']}") from exc


def dumps(env: Envelope) -> str:
    """One-line JSON (as stored in events.jsonl)."""
    return json.dumps(to_dict(env), allow_nan=False, separators=(",", ":"))


def loads(line: str | bytes) -> Envelope:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {exc}") from exc
    return from_dict(data)


def encode(env: Envelope) -> bytes:
    """A frame: length header + JSON payload."""
    payload = dumps(env).encode("utf-8")
    if len(payload) > MAX_FRAME:
        raise FrameTooLarge(f"frame of {len(payload)} bytes is over the {MAX_FRAME}-byte limit")
    return HEADER.pack(len(payload)) + payload


def _check_length(length: int) -> None:
    if length > MAX_FRAME:
        raise FrameTooLarge(f"peer announced a {length}-byte frame; the limit is {MAX_FRAME}")


# --- blocking sockets (engine side) ------------------------------------------------------------
def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> Envelope | None:
    """Read one envelope; None at a clean end of stream."""
    header = _recv_exact(sock, HEADER.size)
    if header is None:
        return None
    (length,) = HEADER.unpack(header)
    _check_length(length)
    payload = _recv_exact(sock, length)
    if payload is None:
        raise ProtocolError("connection closed in the middle of a frame")
    return loads(payload)


def send_frame(sock: socket.socket, env: Envelope) -> None:
    sock.sendall(encode(env))


# --- asyncio streams (client side) -------------------------------------------------------------
async def read_frame(reader: asyncio.StreamReader) -> Envelope | None:
    """Read one envelope; None at a clean end of stream."""
    try:
        header = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ProtocolError("connection closed in the middle of a frame header") from exc
        return None
    (length,) = HEADER.unpack(header)
    _check_length(length)
    try:
        payload = await reader.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError("connection closed in the middle of a frame") from exc
    return loads(payload)


async def write_frame(writer: asyncio.StreamWriter, env: Envelope) -> None:
    writer.write(encode(env))
    await writer.drain()
