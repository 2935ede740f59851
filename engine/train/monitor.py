"""Memory and GPU readings for the metrics stream: RAM via psutil, VRAM via NVML (or torch.cuda) when a GPU exists."""
from __future__ import annotations

import os

import psutil

_PROC = psutil.Process()
_nvml_handle = None
_nvml_tried = False


def _nvml():
    """An NVML handle for the GPU this process uses, or None (no NVIDIA GPU / driver)."""
    global _nvml_handle, _nvml_tried
    if not _nvml_tried:
        _nvml_tried = True
        try:
            import pynvml

            pynvml.nvmlInit()
            index = int((os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0] or 0)
            _nvml_handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # no driver, no GPU, or a non-NVIDIA machine
            _nvml_handle = None
    return _nvml_handle


def _process_vram_mb(handle) -> float | None:
    import pynvml

    try:
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except pynvml.NVMLError:
        return None
    used = [p.usedGpuMemory for p in procs if p.pid == os.getpid() and p.usedGpuMemory]
    return used[0] / 2**20 if used else None


def readings(torch_module=None) -> dict[str, float | None]:
    """RAM (RSS of this process), and where a GPU is: VRAM used by this process, total VRAM, GPU utilisation."""
    out: dict[str, float | None] = {"ram_mb": _PROC.memory_info().rss / 2**20}
    handle = _nvml()
    if handle is not None:
        import pynvml

        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        out["vram_total_mb"] = mem.total / 2**20
        out["vram_mb"] = _process_vram_mb(handle) or mem.used / 2**20
        out["gpu_util"] = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    elif torch_module is not None and torch_module.cuda.is_available():
        out["vram_mb"] = torch_module.cuda.memory_reserved() / 2**20
        out["vram_total_mb"] = torch_module.cuda.get_device_properties(0).total_memory / 2**20
    return out
