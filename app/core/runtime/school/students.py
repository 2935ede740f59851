"""Which students this machine can train (by its memory and GPUs) and how long a cycle of each takes here, from the
training speed measured on this machine — a finished job's tokens/s, or a short measuring job — never a guess."""
from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select

from app.core.base import paths
from app.core.base.schema import Job, Run
from app.core.base.store import Store
from app.core.queue.eta import RECENT_RUNS
from app.core.train.spec import DEFAULT_MODEL, Hyper

GIB = 1024 ** 3
MEASURE_SOURCE = "measure"  # the queue's source of a measuring job
MEASURE_STEPS = 3  # optimizer steps of one full window each: a few minutes on a 2-core CPU at 2048 tokens
CPU_MAX_PARAMS_M = 400  # SmolLM2-135M/360M-class; above, a CPU takes most of a night for a few hundred steps
NOMINAL_STEPS = 100  # a cycle's steps before one has run (the recipe caps a cycle by epochs over its data)
OVERHEAD_GB = 1.5  # the engine's own Python, tokenizer and batch buffers


@dataclass(frozen=True)
class Student:
    name: str
    ref: str  # what the policy's base_model takes: DEFAULT_MODEL (embedded) or a hub id
    params_m: int  # parameters, millions


CATALOG = (
    Student("SmolLM2-135M-Instruct (built in)", DEFAULT_MODEL, 135),
    Student("SmolLM2-360M-Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct", 362),
    Student("Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", 494),
    Student("Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", 1544),
    Student("SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-1.7B-Instruct", 1711),
    Student("Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-3B-Instruct", 3086),
    Student("Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", 7616),
)


@dataclass(frozen=True)
class Machine:
    cores: int
    ram_gb: float
    gpus: tuple[tuple[str, float], ...] = ()  # (name, memory GiB) per NVIDIA GPU

    @property
    def vram_gb(self) -> float:
        return max((gb for _, gb in self.gpus), default=0.0)

    def words(self) -> str:
        gpu = f", {self.gpus[0][0]} ({self.vram_gb:.0f} GiB)" if self.gpus else ", no NVIDIA GPU"
        return f"{self.cores} cores, {self.ram_gb:.0f} GiB RAM{gpu}"


def this_machine() -> Machine:
    """Cores and RAM by psutil; GPUs and their memory by NVML (the driver's library; no torch)."""
    import psutil

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return Machine(cores, psutil.virtual_memory().total / GIB, tuple(_nvml_gpus()) if paths.gpu_count() else ())


def _nvml_gpus() -> list[tuple[str, float]]:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no library: no GPU to offer
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            out.append((name.decode() if isinstance(name, bytes) else str(name),
                        pynvml.nvmlDeviceGetMemoryInfo(handle).total / GIB))
        return out
    except Exception:  # noqa: BLE001
        return []
    finally:
        pynvml.nvmlShutdown()


def how_it_trains(student: Student, machine: Machine) -> tuple[str | None, str]:
    """(method, why): "lora" or "qlora" where it fits this machine, None where it does not, with the figures."""
    billions = student.params_m / 1000
    if machine.gpus:
        lora_gb, qlora_gb = billions * 2 * 1.3 + OVERHEAD_GB, billions * 0.7 * 1.3 + OVERHEAD_GB  # bf16 / 4-bit
        if lora_gb <= machine.vram_gb:
            return "lora", f"LoRA in bf16 needs about {lora_gb:.1f} of {machine.vram_gb:.0f} GiB of GPU memory"
        if qlora_gb <= machine.vram_gb:
            return "qlora", (f"LoRA on a 4-bit base (QLoRA) needs about {qlora_gb:.1f} of {machine.vram_gb:.0f} GiB "
                             f"of GPU memory (bf16 would need {lora_gb:.1f})")
        return None, f"needs about {qlora_gb:.1f} GiB of GPU memory even 4-bit; this GPU has {machine.vram_gb:.0f}"
    ram_gb = billions * 4 * 3 + OVERHEAD_GB  # fp32 weights, their gradients through LoRA, activations
    if ram_gb > machine.ram_gb * 0.8:
        return None, f"needs about {ram_gb:.1f} GiB of RAM on a CPU; this machine has {machine.ram_gb:.0f}"
    if student.params_m > CPU_MAX_PARAMS_M:
        return None, "a GPU-class student: on a CPU a cycle of a few hundred steps takes most of a night"
    return "lora", f"LoRA on the CPU needs about {ram_gb:.1f} of {machine.ram_gb:.0f} GiB of RAM"


# --- measured speed --------------------------------------------------------------------------------------------------
@dataclass
class Rate:
    tokens_per_s: float
    runs: int  # finished jobs whose median it is
    model: str  # the model it was measured on (another one's is scaled by parameters)


def measured(store: Store, model: str) -> Rate | None:
    """The median tokens/s of this model's recent completed runs on this machine (measuring jobs included)."""
    with store.session() as s:
        rows = s.scalars(select(Run.result_json).join(Job).where(
            Job.model_ref == model, Run.state == "completed", Run.result_json.is_not(None))
            .order_by(Run.id.desc()).limit(RECENT_RUNS)).all()
    rates = []
    for raw in rows:
        try:
            rate = json.loads(raw).get("metrics", {}).get("tokens_per_s")
        except (ValueError, AttributeError):
            continue
        if isinstance(rate, (int, float)) and rate > 0:
            rates.append(float(rate))
    return Rate(statistics.median(rates), len(rates), model) if rates else None


def cycle_tokens(store: Store, max_steps: int, max_length: int) -> tuple[int, str]:
    """Tokens a cycle's training trains on, and where the figure comes from: the last cycle's job as planned, else the
    policy's step cap at full windows."""
    from app.core.queue.eta import planned_tokens
    from app.core.train.spec import JobSpec

    with store.session() as s:
        job = s.scalars(select(Job).where(Job.source.like("cycle:%:training")).order_by(Job.created_at.desc())).first()
    if job is not None:
        try:
            spec, _ = JobSpec.read(Path(job.spec_path))
            if tokens := planned_tokens(spec):
                return tokens, f"the last cycle's training ({tokens:,} tokens)"
        except (OSError, ValueError):
            pass
    hyper = Hyper()
    steps = max_steps or NOMINAL_STEPS
    tokens = steps * hyper.batch_size * hyper.grad_accum * max_length
    why = "the policy's max_steps" if max_steps else "no cycle has trained yet"
    return tokens, f"{steps} steps of {hyper.batch_size * hyper.grad_accum} full {max_length}-token windows ({why})"


@dataclass
class Offer:
    student: Student
    method: str | None  # lora | qlora; None: it does not fit this machine
    why: str
    tokens_per_s: float | None = None
    evidence: str = ""  # where the speed comes from
    cycle_s: float | None = None  # training time of one cycle here
    current: bool = False
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"name": self.student.name, "base_model": self.student.ref, "params_m": self.student.params_m,
                "fits": self.method is not None, "method": self.method, "why": self.why,
                "tokens_per_s": self.tokens_per_s, "speed_from": self.evidence, "cycle_training_s": self.cycle_s,
                "current": self.current}


def offers(store: Store, machine: Machine, current: str, max_steps: int, max_length: int) -> tuple[list[Offer], str]:
    """Every catalogued student (and the current base model if it is not one) with whether it fits here and how long
    a cycle's training would take, from speed measured on this machine: its own runs, else the nearest measured
    model's scaled by parameters; with nothing measured, no time (none is made up)."""
    tokens, tokens_from = cycle_tokens(store, max_steps, max_length)
    catalog = list(CATALOG)
    if current not in {s.ref for s in catalog}:
        catalog.append(Student(current, current, 0))
    rates = {s.ref: measured(store, s.ref) for s in catalog}
    out = []
    for student in catalog:
        method, why = how_it_trains(student, machine) if student.params_m else ("lora", "a model of your own")
        offer = Offer(student, method, why, current=student.ref == current)
        own = rates.get(student.ref)
        if own is not None:
            offer.tokens_per_s = own.tokens_per_s
            offer.evidence = f"measured here: median of {own.runs} finished job{'s' if own.runs > 1 else ''}"
        elif student.params_m:
            near = min((r for r in rates.values() if r is not None and _params(r.model)),
                       key=lambda r: abs(_params(r.model) - student.params_m), default=None)
            if near is not None:
                offer.tokens_per_s = near.tokens_per_s * _params(near.model) / student.params_m
                offer.evidence = f"scaled by parameters from {_name(near.model)}'s {near.tokens_per_s:,.0f} tokens/s"
        if offer.tokens_per_s:
            offer.cycle_s = tokens / offer.tokens_per_s
        else:
            offer.evidence = "not measured here yet"
        out.append(offer)
    return out, tokens_from


def _params(ref: str) -> int:
    return next((s.params_m for s in CATALOG if s.ref == ref), 0)


def _name(ref: str) -> str:
    return next((s.name for s in CATALOG if s.ref == ref), ref)


# --- measuring -------------------------------------------------------------------------------------------------------
def measuring_data(max_length: int, examples: int = 32) -> Path:
    """A chat file of full-window examples (plain tool-use text) for a measuring job: its tokens/s is what a cycle
    trains at. Written once per length under the data dir's work folder."""
    from app.core.base.files import atomic_write

    path = paths.work_dir() / f"measure-{max_length}.jsonl"
    if not path.is_file():
        words = " ".join(f"step {i}: run the tests, read the failure, edit the file, run them again." for i in
                         range(max_length // 16 + 1))
        lines = [json.dumps({"messages": [{"role": "user", "content": f"Task {n}: make the build pass."},
                                          {"role": "assistant", "content": words}]}) for n in range(examples)]
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, ("\n".join(lines) + "\n").encode())
    return path


def measure(queue, model: str, max_length: int) -> Job:
    """Queue a short job of this model (MEASURE_STEPS steps of one full window) whose tokens/s the offers then use."""
    hyper = Hyper(max_steps=MEASURE_STEPS, max_length=max_length, batch_size=1, grad_accum=1, save_steps=10_000)
    return queue.add(measuring_data(max_length), model=model, hyper=hyper, priority="high", source=MEASURE_SOURCE)
