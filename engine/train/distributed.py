"""Jobs with several processes (`accelerate launch`: one process per GPU, or CPU processes with gloo).

Every rank runs `python -m engine --spec FILE`; the rank comes from the launcher's environment (RANK, WORLD_SIZE).
Only the main process (rank 0) is the engine clients see: it binds the socket, writes events.jsonl, checkpoint
markers, retention, plan.json, resumes.json and result.json. The other ranks get a `SilentServer` (same interface,
emits nothing, its controls mirror rank 0's) and train, save collectively and exit without a result.

Client commands arrive only at rank 0, so the ranks agree once per step (a broadcast of a few ints from rank 0):
`exchange` in the stream callback (pause / stop / checkpoint_now; a pause is waited out in short broadcasts, so no
collective times out however long it lasts) and `agree_callback`, the last callback, which gives every rank rank 0's
save / stop / log / evaluate decisions (the budget's wall clock differs a little between processes).

Importing this module is cheap (no torch): `__main__` uses it before the socket comes up.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

from app.core.base import protocol as P

PAUSE_POLL_S = 0.5  # while paused, rank 0 tells the others "still paused" this often
PARENT_POLL_S = 0.25  # a rank checks this often that its launcher is still alive
_PR_SET_PDEATHSIG = 1


# --- who am I -----------------------------------------------------------------------------------
def world_size() -> int:
    return _env_int("WORLD_SIZE", 1)


def rank() -> int:
    return _env_int("RANK", 0)


def local_rank() -> int:
    return _env_int("LOCAL_RANK", 0)


def is_main() -> bool:
    return rank() == 0


def launched() -> bool:
    """Whether this process was started by a distributed launcher (torchrun, under `accelerate launch`)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or world_size() > 1


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def configure_env() -> None:
    """Before torch is imported: NIGHTSCHOOL_GPUS=0 means train on the CPU even where CUDA exists (the launcher
    chose CPU processes for the same setting, see app.core.base.paths.accelerate_args)."""
    if os.environ.get("NIGHTSCHOOL_GPUS", "").strip() == "0":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def watch_parent() -> None:
    """A rank ends when its launcher does (kill -9 of the job's process must not leave ranks training): the
    launcher starts each rank in a session of its own, so signalling the job's process group does not reach them.
    Linux: PR_SET_PDEATHSIG; everywhere: a thread that notices the rank was re-parented."""
    if not launched():
        return
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # it died before the line above
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="engine-parent-watch", daemon=True).start()


# --- the server other ranks get -----------------------------------------------------------------
class SilentServer:
    """The EngineServer's interface for ranks other than 0: emits nothing, binds nothing, writes nothing."""

    def __init__(self, job_id: str, kind: str = "sft") -> None:
        from engine.train.jobsocket import Controls

        self.job_id, self.kind = job_id, kind
        self.controls = Controls()
        self.state = "starting"
        self.on_command = None
        self._seq = 0

    def start(self) -> None:
        return None

    def close(self) -> None:
        return None

    def emit(self, body: P.Body, reply_to: str | None = None) -> P.Envelope:
        if isinstance(body, P.State):
            self.state = body.state
        self._seq += 1
        return P.make(body, job=self.job_id, seq=self._seq, reply_to=reply_to)


def server_for(job_id: str, socket_path: Path, token: str, events_path: Path, kind: str = "sft"):
    """The EngineServer on the main process, a SilentServer on the others."""
    if is_main():
        from engine.train.jobsocket import EngineServer

        return EngineServer(job_id, socket_path, token, events_path, kind)
    return SilentServer(job_id, kind)


# --- collectives (no-ops in a single process) ---------------------------------------------------
def active() -> bool:
    """Whether this process is one of several in an initialised process group."""
    if world_size() <= 1:
        return False
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        _init_group()
    return dist.is_initialized()


def _init_group() -> None:
    """The trainer normally initialises the group; a collective needed before it does so starts it the same way."""
    import torch
    from accelerate import PartialState

    PartialState(cpu=not torch.cuda.is_available())


def _device():
    import torch
    import torch.distributed as dist

    if "nccl" in str(dist.get_backend()) and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def broadcast_ints(values: list[int]) -> list[int]:
    """Rank 0's values, on every rank (a single process gets its own back)."""
    if not active():
        return list(values)
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([int(v) for v in values], dtype=torch.int64, device=_device())
    dist.broadcast(tensor, src=0)
    return [int(v) for v in tensor.tolist()]


def barrier() -> None:
    if active():
        import torch.distributed as dist

        dist.barrier()


def describe() -> str | None:
    """'2 processes (gloo, cpu)' in a process group of several, else None."""
    if not active():
        return None
    import torch.distributed as dist

    device = _device().type
    if device == "cpu":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return f"{dist.get_world_size()} processes ({dist.get_backend()}, {device})"


# --- client controls, agreed between ranks ------------------------------------------------------
class Flags(NamedTuple):
    stop: bool
    checkpoint: bool
    paused: bool


def _local(controls) -> Flags:
    return Flags(controls.stop_requested.is_set(), controls.checkpoint_requested.is_set(), controls.paused)


def exchange(controls) -> Flags:
    """Rank 0's control flags, taken once: every rank acts on the same snapshot. The other ranks' Controls are set
    to match (their stall watchdog sees the pause)."""
    local = _local(controls)
    if not active():
        return local
    flags = Flags(*(bool(v) for v in broadcast_ints(list(local))))
    if not is_main():
        if flags.stop:
            controls.stop_requested.set()
        if flags.checkpoint:
            controls.checkpoint_requested.set()
        if flags.paused and not flags.stop:
            controls.resume_event.clear()
        else:
            controls.resume_event.set()
    return flags


def wait_while_paused(controls) -> Flags:
    """Block until rank 0 is resumed (or stopped); returns the flags seen when it was. In a process group, rank 0
    re-broadcasts every PAUSE_POLL_S, so the others wait in short collectives."""
    if not active():
        controls.resume_event.wait()
        return _local(controls)
    while True:
        if is_main():
            controls.resume_event.wait(PAUSE_POLL_S)
        flags = exchange(controls)
        if not flags.paused or flags.stop:
            return flags


_CONTROL_FIELDS = ("should_log", "should_evaluate", "should_save", "should_training_stop", "should_epoch_stop")


def agree(control):
    """Rank 0's log / evaluate / save / stop decisions for this step, on every rank: ranks that disagree (one saves
    or stops, another trains on) would wait on each other's collectives for ever."""
    if active():
        values = broadcast_ints([int(bool(getattr(control, f))) for f in _CONTROL_FIELDS])
        for field, value in zip(_CONTROL_FIELDS, values):
            setattr(control, field, bool(value))
    return control


def agree_callback():
    """A TrainerCallback, placed last (after the budget and the checker), that applies `agree` at each step end."""
    from transformers import TrainerCallback

    class AgreeCallback(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            return agree(control)

    return AgreeCallback()


# --- the recipe in a process group --------------------------------------------------------------
def prepare(recipe) -> None:
    """Fit a recipe instance for this process: FSDP's final save gathers a full state dict (a PEFT adapter, not
    shards); in a process group the callbacks end with the agreement, rank 0 alone sets torn checkpoints aside and
    records the resume (the others take its choice), and every rank learns whether rank 0's checker ended the run."""
    original_save = recipe.save_checkpoint

    def save_checkpoint():
        full_state_dict_for_saving(recipe.trainer)
        return original_save()

    recipe.save_checkpoint = save_checkpoint
    if world_size() <= 1:
        return
    original_callbacks = recipe._callbacks
    recipe._callbacks = lambda: original_callbacks() + [agree_callback()]
    if is_main():
        original_resume, original_train = recipe._resume_point, recipe.train

        def resume_point():
            info = original_resume()
            broadcast_ints([info.step if info else -1])
            return info

        def train():
            original_train()
            broadcast_ints([int(_fatal(recipe))])

        recipe._resume_point, recipe.train = resume_point, train
    else:
        recipe._resume_point = lambda: _resume_as_main(recipe)


def _resume_as_main(recipe):
    """The checkpoint rank 0 resumes from (after it set torn ones aside): read only."""
    from app.core.train import checkpoints as ckpt

    (step,) = broadcast_ints([-1])
    if step < 0:
        return None
    folder = Path(recipe.ckpt_root) / f"checkpoint-{step}"
    return ckpt.verify(folder) or ckpt.CheckpointInfo(folder, step, None, None, 0.0, 0, "scheduled")


def _fatal(recipe) -> bool:
    return getattr(recipe.callbacks.get("checker"), "fatal", None) is not None


def full_state_dict_for_saving(trainer) -> None:
    """Under FSDP the final save must gather a full state dict (PEFT's guidance): with sharded state dicts the
    trainer would write shards, not an adapter. Every rank calls this before `save_model`."""
    if trainer is not None and getattr(trainer, "is_fsdp_enabled", False):
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")


def run_worker(recipe) -> int:
    """A rank other than 0: train in step with rank 0, take part in the final save (the recipe's save steps run
    on every rank: FSDP/DeepSpeed gather the weights collectively; the trainer lets only rank 0 write), and exit.
    No result, no events, no files in the run dir."""
    scratch = Path(tempfile.mkdtemp(prefix=f"nightschool-rank{rank()}-"))
    try:
        recipe.setup()
        checker = recipe.callbacks.get("checker")
        if checker is not None:
            checker.run_dir = scratch  # rank 0 writes the diagnosis; the same findings here go nowhere
        recipe.train()
        (fatal,) = broadcast_ints([int(_fatal(recipe))])
        if fatal:
            return 1
        recipe.tokenizer = _Unwritten(recipe.tokenizer)  # rank 0 writes the tokenizer next to the adapter
        recipe.save_checkpoint()  # the recipe's own steps (e.g. dropping a reference adapter), then save_model
        return 0
    finally:
        recipe.cleanup()
        shutil.rmtree(scratch, ignore_errors=True)


class _Unwritten:
    """A tokenizer whose save_pretrained writes nothing (everything else passes through)."""

    def __init__(self, tokenizer) -> None:
        object.__setattr__(self, "_tokenizer", tokenizer)

    def save_pretrained(self, *args, **kwargs):
        return ()

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def __setattr__(self, name, value) -> None:
        setattr(self._tokenizer, name, value)
