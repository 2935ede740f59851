"""Protocol: every message type round-trips (blocking and asyncio framing); oversize, NaN, versions, unknowns."""
from __future__ import annotations

import asyncio
import json
import socket

import pytest

from app.core.base import protocol as P

SAMPLES: dict[str, P.Body] = {
    "hello": P.Hello(token="t0k", since_seq=7, pid=12, kind="sft"),
    "state": P.State(state="paused", detail="at step 3"),
    "progress": P.Progress(step=3, total=10, epoch=0.5, eta_s=12.5, elapsed_s=4.0),
    "metrics": P.Metrics(step=3, loss=1.25, lr=2e-4, grad_norm=0.5, tokens_per_s=900.0, ram_mb=512.0,
                         vram_mb=1024.0, vram_total_mb=80000.0, gpu_util=55.0, reward=0.5,
                         rewards={"constraint": 0.75}, margin=1.5, accuracy=0.75),
    "log": P.Log(level="warning", message="hello"),
    "alert": P.Alert(kind="nan", message="loss is nan", step=4, severity="fatal", diagnosis_path="/r/diagnosis.md"),
    "plan": P.Plan(ok=True, recipe="sft", examples=24, steps=12, tokens=4096, problems=[]),
    "checkpoint": P.Checkpoint(step=5, path="/x/checkpoint-5", reason="requested"),
    "built": P.Built(name="sft-1", path="/d", manifest_sha256="b" * 64, fingerprint="c" * 64, examples=3),
    "evaluated": P.Evaluated(label="base", path="/e", report_sha256="d" * 64, metrics={"loss": 1.5, "reward": None},
                             contexts=12),
    "exported": P.Exported(label="#3 job final", path="/x", files=[{"quant": "q4_k_m", "file": "m.gguf", "ok": True}],
                           stop=["<|im_end|>"]),
    "report": P.Report(target="sft-1", checked=3, problems=[{"example": "x", "check": "leakage", "detail": "d"}]),
    "result": P.Result(job_id="j", status="completed", adapter_path="/a", adapter_sha256="a" * 64,
                       spec_sha256="b" * 64, dataset_sha256="c" * 64, base_model="default",
                       metrics={"steps": 3, "first_loss": 2.0, "last_loss": 1.0}),
    "error": P.Error(message="boom", why="because", fix="do this", traceback="tb"),
    "ack": P.Ack(command="pause"),
    "pong": P.Pong(state="running"),
    "pause": P.Pause(), "resume": P.Resume(), "stop": P.Stop(), "checkpoint_now": P.CheckpointNow(), "ping": P.Ping(),
}


def test_every_registered_type_has_a_sample():
    assert set(SAMPLES) == set(P.REGISTRY)


@pytest.mark.parametrize("type_", sorted(P.REGISTRY))
def test_round_trip_over_a_socket(type_):
    env = P.make(SAMPLES[type_], job="job-1", seq=9, reply_to="abc")
    a, b = socket.socketpair()
    with a, b:
        P.send_frame(a, env)
        got = P.recv_frame(b)
    assert got.type == type_ and got.job == "job-1" and got.seq == 9 and got.reply_to == "abc"
    assert got.body == SAMPLES[type_]


@pytest.mark.parametrize("type_", sorted(P.REGISTRY))
def test_round_trip_over_asyncio_streams(type_):
    async def go():
        reader = asyncio.StreamReader()
        reader.feed_data(P.encode(P.make(SAMPLES[type_])))
        reader.feed_eof()
        first = await P.read_frame(reader)
        return first, await P.read_frame(reader)

    got, end = asyncio.run(go())
    assert got.body == SAMPLES[type_] and end is None


def test_nan_loss_travels_as_null_with_a_flag():
    env = P.make(P.Metrics(step=1, loss=float("nan"), grad_norm=float("inf"), lr=1e-4))
    line = P.dumps(env)
    assert "NaN" not in line and "Infinity" not in line
    body = P.loads(line).body
    assert body.loss is None and body.grad_norm is None and body.lr == 1e-4
    assert body.nonfinite == ["grad_norm", "loss"]


def test_oversize_frame_is_refused_on_both_ends():
    huge = P.make(P.Log(message="x" * (P.MAX_FRAME + 1)))
    with pytest.raises(P.FrameTooLarge):
        P.encode(huge)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(P.HEADER.pack(P.MAX_FRAME + 1) + b"{}")
        with pytest.raises(P.FrameTooLarge):
            P.recv_frame(b)


def test_major_version_mismatch_is_a_clear_error():
    data = P.to_dict(P.make(P.Ping()))
    data["v"] = 2
    with pytest.raises(P.VersionMismatch, match="v2"):
        P.from_dict(data)


def test_unknown_type_and_unknown_fields_are_tolerated():
    data = P.to_dict(P.make(P.Log(message="hi")))
    data["body"]["future_field"] = 1
    assert P.from_dict(data).body.message == "hi"
    other = P.from_dict({"v": 1, "type": "telemetry", "body": {"x": 1}})
    assert not other.known and other.body == {"x": 1}


def test_malformed_known_body_is_a_protocol_error():
    with pytest.raises(P.ProtocolError, match="progress"):
        P.from_dict({"v": 1, "type": "progress", "body": {"step": "many"}})


def test_torn_frame_is_an_error_not_a_silent_end():
    a, b = socket.socketpair()
    with b:
        a.sendall(P.HEADER.pack(100) + b'{"v":1')
        a.close()
        with pytest.raises(P.ProtocolError):
            P.recv_frame(b)


def test_frames_are_length_prefixed_utf8_json():
    frame = P.encode(P.make(P.Log(message="naïve ✓")))
    (length,) = P.HEADER.unpack(frame[:4])
    assert length == len(frame) - 4
    assert json.loads(frame[4:].decode("utf-8"))["body"]["message"] == "naïve ✓"
    assert frame[:4] == length.to_bytes(4, "big")  # the header: 4 bytes, big-endian, the payload's byte count
