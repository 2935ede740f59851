"""bench/gpu_check.py's no-GPU mode: green on a machine without CUDA, every GPU check named as skipped with its reason,
the engine set-up's torch choice read off the real Setup, and the LoRA job's spec dry-run through `python -m engine`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GPU_ONLY = {"attention", "sft_lora", "sft_qlora", "plain_trl", "eval", "park"}


def test_the_no_gpu_mode_runs_green_and_says_what_it_skipped(tmp_path, tiny_model):
    out = tmp_path / "gpu.json"
    done = subprocess.run([sys.executable, "bench/gpu_check.py", "--no-gpu", "--model", str(tiny_model),
                           "--records", "8", "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["ok"] is True and report["cuda"] is False
    checks = report["checks"]
    assert checks["enginenv"]["status"] == "ok"
    assert checks["enginenv"]["torch_pip_args"].startswith(f"install torch=={checks['enginenv']['torch_pin']}")
    assert {n for n, e in checks.items() if e["status"] == "skipped"} == GPU_ONLY
    assert all(checks[n]["why"] for n in GPU_ONLY)
    assert "dry-run through `python -m engine`" in checks["sft_lora"]["why"]  # the spec the GPU run uses was checked
    skipped_line = next(line for line in done.stdout.splitlines() if line.startswith("skipped: "))
    assert all(f"{n} (" in skipped_line for n in GPU_ONLY)
