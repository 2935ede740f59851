"""What the GPU check runs and measures with: child processes with a private data dir, NVML readings, peak sampling."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout (this file: bench/gpu/probe.py)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
RANDOM_NOTE = ("SmolLM2-135M's architecture with seeded random weights (the real weights were not on this machine): "
               "throughput and VRAM are the real model's, losses and generations are not")


class Skip(Exception):
    """A check that cannot run here; the message says why."""


class Failed(Exception):
    """A check that ran and failed; the message says what, why and what to do."""


def child_env(home: Path) -> dict[str, str]:
    """Children run this checkout's engine, with a private data dir."""
    env = dict(os.environ, NIGHTSCHOOL_HOME=str(home), PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


# --- NVML ----------------------------------------------------------------------------------------------------------

class Gpu:
    """NVML readings of GPU 0: device memory used, and one process's memory where the driver lists it."""

    def __init__(self) -> None:
        import pynvml

        self.nv = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    def info(self) -> dict:
        nv, h = self.nv, self.handle
        cuda = nv.nvmlSystemGetCudaDriverVersion_v2()
        return {"name": nv.nvmlDeviceGetName(h), "driver": nv.nvmlSystemGetDriverVersion(),
                "driver_cuda": f"{cuda // 1000}.{cuda % 1000 // 10}", "memory_mb": self.total_mb()}

    def total_mb(self) -> float:
        return self.nv.nvmlDeviceGetMemoryInfo(self.handle).total / 2**20

    def used_mb(self) -> float:
        return self.nv.nvmlDeviceGetMemoryInfo(self.handle).used / 2**20

    def process_mb(self, pid: int) -> float | None:
        try:
            procs = self.nv.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except self.nv.NVMLError:
            return None
        for p in procs:
            if p.pid == pid and p.usedGpuMemory is not None:
                return p.usedGpuMemory / 2**20
        return None


class PeakSampler:
    """The peak VRAM of one child process, sampled every 0.1 s: its own NVML figure where the driver reports it,
    else the device's use above the level before it started (both are said in `how`)."""

    def __init__(self, gpu: Gpu | None, pid: int) -> None:
        self.gpu, self.pid, self.peak, self.how = gpu, pid, 0.0, ""
        self.base = gpu.used_mb() if gpu else 0.0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        if gpu:
            self.thread.start()

    def _loop(self) -> None:
        while not self.done.wait(0.1):
            own = self.gpu.process_mb(self.pid)
            value = own if own is not None else self.gpu.used_mb() - self.base
            self.how = "nvml process" if own is not None else "nvml device used - before"
            self.peak = max(self.peak, value)

    def stop(self) -> float:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()
        return round(self.peak, 1)


def run_child(cmd: list[str], env: dict, log: Path, gpu: Gpu | None, timeout: float) -> tuple[int, float, str]:
    """(exit code, peak VRAM MB, how it was read) of one child process, its output in `log`."""
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        sampler = PeakSampler(gpu, proc.pid)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = -9
        peak = sampler.stop()
    return code, peak, sampler.how


def tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""
