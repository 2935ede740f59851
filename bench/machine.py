"""The machine a benchmark runs on: torch threads for it and its engines, and the load to print beside figures."""
from __future__ import annotations

import os


def set_threads(n: int) -> str:
    """Torch intra-op threads for this process and the engines it starts (0: torch's default, one per core).

    On a 2-core machine that other work keeps busy, 2 OpenMP threads that wait for each other at every op slow a tiny
    model's step 5-7x (measured: 0.06 s -> 0.2-0.5 s per micro-batch); 1 thread keeps ratios stable."""
    if n > 0:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(n)
        return str(n)
    return f"default ({os.cpu_count()})"


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min) on {os.cpu_count()} cores"
