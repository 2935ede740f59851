"""Jobs with several processes: `accelerate launch` with 2 CPU processes (gloo) on the tiny model, as far as a CPU
allows. One engine is visible (rank 0: socket, events, markers, result); the ranks agree on pause, checkpoint_now,
saves and stops; killing the job's process (the launcher) ends every rank and the job resumes from its checkpoint."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from app.core.base import paths
from app.core.train.events import read_events
from tests.conftest import fast_hyper
from tests.engine.helpers import attempts, of_type, send_command, states, wait_for_events

STEPS, SAVE = 60, 10
WORLD = "2 processes (gloo, cpu)"
REPO = Path(__file__).resolve().parents[2]
PAUSE_ROUNDS = 3  # "still paused" broadcasts both ranks take part in before the paused job is resumed
TRACE_ENV = "NIGHTSCHOOL_TEST_EXCHANGES"
# A sitecustomize for the job's processes (test only): each rank appends the flags of every exchange it takes part in
# (engine.train.distributed.exchange: once per step, and once per PAUSE_POLL_S while paused) to the file $TRACE_ENV names.
EXCHANGE_TRACE = r"""
import json, os

from engine.train import distributed

_exchange = distributed.exchange


def exchange(controls):
    flags = _exchange(controls)
    with open(os.environ["NIGHTSCHOOL_TEST_EXCHANGES"], "a") as trace:
        trace.write(json.dumps([distributed.rank(), *(bool(f) for f in flags)]) + "\n")
    return flags


distributed.exchange = exchange
"""


# --- the launcher's options (no torch) ---------------------------------------------------------------
@pytest.fixture
def no_gpu_env(monkeypatch):
    for name in ("NIGHTSCHOOL_GPUS", "NIGHTSCHOOL_ACCELERATE_CONFIG", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _config_of(args: list[str]) -> Path:
    return Path(args[args.index("--config_file") + 1])


def test_accelerate_args_choose_fsdp_on_gpus_and_cpu_processes_without(no_gpu_env):
    mp = no_gpu_env
    mp.setenv("NIGHTSCHOOL_GPUS", "0")
    args = paths.accelerate_args(2)
    assert _config_of(args).name == "cpu.yaml" and args[args.index("--num_processes") + 1] == "2"
    mp.setenv("NIGHTSCHOOL_GPUS", "4")
    assert _config_of(paths.accelerate_args(2)).name == "fsdp.yaml"
    mp.setenv("NIGHTSCHOOL_GPUS", "1")
    with pytest.raises(paths.SetupError, match="1 GPU"):
        paths.accelerate_args(2)
    mp.setenv("NIGHTSCHOOL_ACCELERATE_CONFIG", "deepspeed_zero2")
    assert _config_of(paths.accelerate_args(2)).name == "deepspeed_zero2.yaml"
    mp.setenv("NIGHTSCHOOL_ACCELERATE_CONFIG", "no-such-config")
    with pytest.raises(paths.SetupError, match="neither a shipped config"):
        paths.accelerate_args(2)
    mp.delenv("NIGHTSCHOOL_ACCELERATE_CONFIG")
    mp.delenv("NIGHTSCHOOL_GPUS")
    mp.setenv("CUDA_VISIBLE_DEVICES", "")  # every GPU hidden: CPU processes whatever the machine has
    assert _config_of(paths.accelerate_args(2)).name == "cpu.yaml"


def test_every_shipped_accelerate_config_loads():
    from accelerate.commands.config.config_args import load_config_from_file

    kinds = {}
    for path in sorted(paths.ACCELERATE_CONFIGS.glob("*.yaml")):
        config = load_config_from_file(str(path))
        kinds[path.stem] = (str(config.distributed_type).split(".")[-1], config.main_process_port)
    assert kinds == {"cpu": ("MULTI_GPU", 0), "ddp": ("MULTI_GPU", 0), "deepspeed_zero2": ("DEEPSPEED", 0),
                     "fsdp": ("FSDP", 0)}


# --- the ranks' agreement, in two real gloo processes (no training) ----------------------------------
def _agreement_rank(rank: int, port: int, results) -> None:
    """One of two processes: rank 0 holds the client's commands; both must see the same flags at each step."""
    import threading
    from datetime import timedelta

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", CUDA_VISIBLE_DEVICES="")
    from types import SimpleNamespace

    import torch.distributed as dist

    from engine.train import distributed
    from engine.train.jobsocket import Controls

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    c, seen = Controls(), {}
    if rank == 0:
        c.checkpoint_requested.set()
    seen["checkpoint"] = distributed.exchange(c).checkpoint and c.checkpoint_requested.is_set()
    if rank == 0:
        c.checkpoint_requested.clear()
        c.resume_event.clear()  # paused by a client; resumed 1.2 s later
        threading.Timer(1.2, c.resume_event.set).start()
    began = time.monotonic()
    flags = distributed.exchange(c)
    seen["paused"] = flags.paused and c.paused
    flags = distributed.wait_while_paused(c)
    seen["waited"] = time.monotonic() - began >= 1.0 and not flags.paused and not c.paused
    if rank == 0:
        c.stop_requested.set()
    flags = distributed.exchange(c)
    seen["stop"] = flags.stop and c.stop_requested.is_set()
    control = SimpleNamespace(should_log=True, should_evaluate=False, should_save=rank == 0,
                              should_training_stop=rank == 0, should_epoch_stop=False)  # e.g. rank 0's budget
    control = distributed.agree(control)
    seen["agreed"] = control.should_save and control.should_training_stop
    seen["world"] = distributed.describe()
    dist.destroy_process_group()
    results.put((rank, seen))


def test_ranks_take_rank_0s_commands_and_decisions():
    import multiprocessing
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_agreement_rank, args=(r, port, results)) for r in (0, 1)]
    for p in procs:
        p.start()
    try:
        got = dict(results.get(timeout=120) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    expected = {"checkpoint": True, "paused": True, "waited": True, "stop": True, "agreed": True,
                "world": "2 processes (gloo, cpu)"}
    assert got == {0: expected, 1: expected}


def test_a_single_process_needs_no_collective(monkeypatch):
    from engine.train import distributed
    from engine.train.jobsocket import Controls

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    c = Controls()
    c.checkpoint_requested.set()
    assert distributed.exchange(c) == distributed.Flags(stop=False, checkpoint=True, paused=False)
    assert distributed.describe() is None and distributed.broadcast_ints([3, 4]) == [3, 4]

    class Plugin:
        kind = "SHARDED_STATE_DICT"

        def set_state_dict_type(self, kind):
            self.kind = kind

    class Trainer:  # what full_state_dict_for_saving touches of an FSDP trainer
        is_fsdp_enabled = True
        accelerator = type("A", (), {"state": type("S", (), {"fsdp_plugin": Plugin()})()})()

    trainer = Trainer()
    distributed.full_state_dict_for_saving(trainer)
    assert trainer.accelerator.state.fsdp_plugin.kind == "FULL_STATE_DICT"


# --- a real job with two CPU processes ---------------------------------------------------------------
def _ranks(spec_path: str) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """(launchers, ranks) of a job: processes whose command line names its spec."""
    launchers, ranks = [], []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if spec_path in cmd and "engine" in cmd:
            (launchers if any("accelerate" in part for part in cmd) else ranks).append(proc)
    return launchers, ranks


def _exchanges(trace: Path) -> dict[int, list[tuple[bool, bool, bool]]]:
    """The (stop, checkpoint, paused) flags each rank took, exchange by exchange (complete lines only)."""
    by_rank: dict[int, list[tuple[bool, bool, bool]]] = {0: [], 1: []}
    text = trace.read_text() if trace.is_file() else ""
    for line in text.splitlines(keepends=True):
        if line.endswith("\n"):
            rank, *flags = json.loads(line)
            by_rank[rank].append(tuple(flags))
    return by_rank


def _paused_exchanges(trace: Path) -> int:
    """How many paused exchanges the rank that has taken the fewer has taken."""
    return min(sum(flags[2] for flags in taken) for taken in _exchanges(trace).values())


def _last_step(events: list) -> int:
    return max((e.body.step for e in of_type(events, "progress") if e.body.phase == "train"), default=-1)


def test_two_cpu_processes_train_as_one_engine(manager, chat_file, tiny_model, no_gpu_env, tmp_path):
    no_gpu_env.setenv("NIGHTSCHOOL_GPUS", "0")  # CPU processes even where the machine has GPUs
    hook, trace = tmp_path / "hook", tmp_path / "exchanges.jsonl"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(EXCHANGE_TRACE)
    pythonpath = [str(hook), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    no_gpu_env.setenv("PYTHONPATH", os.pathsep.join(pythonpath))
    no_gpu_env.setenv(TRACE_ENV, str(trace))
    started = time.monotonic()
    job = manager.submit(chat_file, model=str(tiny_model), hyper=fast_hyper(max_steps=STEPS, save_steps=SAVE),
                         processes=2)
    run = manager.latest_run(job.id)
    run_dir = Path(run.run_dir)
    alive = lambda: manager.is_alive(run)  # noqa: E731
    launcher = psutil.Process(run.pid)
    assert "accelerate.commands.launch" in launcher.cmdline() and "cpu.yaml" in " ".join(launcher.cmdline())

    # pause / checkpoint_now / resume reach rank 0 only: the other rank must follow, or the job hangs
    events = wait_for_events(run_dir, lambda ev: len(of_type(ev, "metrics")) >= 3, timeout=240, alive=alive)
    _, ranks = _ranks(job.spec_path)
    assert len(ranks) == 2, [p.cmdline() for p in ranks]
    send_command(manager, job.id, "pause")
    events = wait_for_events(run_dir, lambda ev: "paused" in states(ev), alive=alive)
    paused_seq = [e.seq for e in of_type(events, "state") if e.body.state == "paused"][0]
    # several rounds of "still paused" between the ranks: rank 0 re-broadcasts the pause, rank 1 takes each
    deadline = time.monotonic() + 60
    while _paused_exchanges(trace) < 1 + PAUSE_ROUNDS:  # the step's exchange that saw the pause, then the rounds
        assert alive() and time.monotonic() < deadline, f"paused exchanges: {_exchanges(trace)}"
        time.sleep(0.05)
    send_command(manager, job.id, "checkpoint_now")
    send_command(manager, job.id, "resume")
    events = wait_for_events(run_dir, lambda ev: any(c.body.reason == "requested" for c in of_type(ev, "checkpoint"))
                             and _last_step(ev) >= SAVE + 2, alive=alive)
    resumed_seq = [e.seq for e in of_type(events, "state") if e.seq > paused_seq][0]
    assert not of_type([e for e in events if paused_seq < e.seq < resumed_seq], "metrics"), "trained while paused"
    taken = _exchanges(trace)
    common = min(len(taken[0]), len(taken[1]))
    assert taken[0][:common] == taken[1][:common], taken  # both ranks took the same flags, exchange by exchange
    paused = [i for i, (_, _, is_paused) in enumerate(taken[1][:common]) if is_paused]
    assert len(paused) >= 1 + PAUSE_ROUNDS and paused == list(range(paused[0], paused[-1] + 1)), taken[1]  # one pause
    assert common > paused[-1] + 1, taken[1]  # then both went on exchanging, unpaused: resumed together
    assert any(checkpoint for _, checkpoint, _ in taken[1][paused[0]:common]), taken[1]  # checkpoint_now reached rank 1

    # kill -9 of the job's process (the launcher) ends both ranks; the job resumes from its last good checkpoint
    os.kill(run.pid, signal.SIGKILL)
    gone, still = psutil.wait_procs(ranks, timeout=10)
    assert not still, f"ranks outlived their launcher: {[p.pid for p in still]}"
    deadline = time.monotonic() + 30
    while manager.is_alive(run):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert manager.reconcile() == [job.id]
    job = manager.wait(job.id, timeout=300)
    elapsed = time.monotonic() - started
    assert job.state == "completed", job.error  # finalise validated result.json against the spec

    events = read_events(run_dir / "events.jsonl")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # one numbering: one writer
    runs = attempts(events)
    assert len(runs) == 2
    for attempt in runs:
        assert [e.body.message for e in of_type(attempt, "log")].count(WORLD) == 1
        steps = [e.body.step for e in of_type(attempt, "metrics") if e.body.loss is not None]
        assert len(steps) == len(set(steps)) and steps == sorted(steps), steps  # no step reported twice
    losses = {e.body.step: e.body.loss for e in of_type(events, "metrics") if e.body.loss is not None}
    assert sorted(losses) == list(range(1, STEPS + 1))
    first, last = [losses[s] for s in range(1, 6)], [losses[s] for s in range(STEPS - 4, STEPS + 1)]
    assert sum(last) / 5 < sum(first) / 5 - 0.1, losses

    result = json.loads((run_dir / "result.json").read_text())
    resumed = result["resumed_from"]
    assert result["status"] == "completed" and result["metrics"]["steps"] == STEPS
    assert len(resumed) == 1 and resumed[0] >= SAVE, resumed  # recorded once (rank 0), not per rank
    assert (run_dir / "adapter" / "adapter_model.safetensors").is_file()
    sealed = sorted((run_dir / "checkpoints").glob("checkpoint-*/nightschool-checkpoint.json"))
    assert sealed, "no sealed checkpoint"
    for marker in sealed:  # sealed after both ranks wrote their part
        files = json.loads(marker.read_text())["files"]
        assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(files), sorted(files)
    kinds = [c.kind for c in manager.checkpoints(job.id)]
    assert kinds[-1] == "adapter" and "checkpoint" in kinds
    print(f"\n2-process job (pause, checkpoint_now, kill -9, resume, finish): {elapsed:.0f}s")
