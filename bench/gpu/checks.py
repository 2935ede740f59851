"""The GPU check's checks: the engine set-up, SFT LoRA / QLoRA jobs, plain TRL, evaluation, park/unpark."""
from __future__ import annotations

import contextlib
import itertools
import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.gpu.probe import Failed, ROOT, Skip, run_child, tail



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
    said = next((m.split(":", 1)[1] for m in logs if m.startswith("padding-free attention:")), None)
    out["attention"] = said.split("(")[0].strip() if said else None
    out["attention_how"] = said.split("(", 1)[1].rstrip(")") if said and "(" in said else None
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
    configs = [EvalConfig(label=label, base_model=ctx["model_ref"], adapter=adapter, eval_file=str(held),
                          eval_set="gpu-check", eval_set_sha256=sha256_file(held),
                          settings=EvalSettings(max_contexts=16, max_new_tokens=32))
               for label, adapter in (("gpu-check-base", None), ("gpu-check", lora["adapter"]))]
    folder = ctx["tmp"] / "eval"
    folder.mkdir()
    # as a cycle judges: the models of one judgement (base, then candidate) in one worker, each into out/<n>
    spec = {"configs": [c.model_dump() for c in configs], "job": "gpu-eval", "out": str(folder / "out"),
            "models_dir": str(ctx["home"] / "models")}
    (folder / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    started = time.monotonic()
    rc, peak, how = run_child([sys.executable, "-m", "engine.workers.evaluate", "--spec", str(folder / "spec.json")],
                              ctx["env"], folder / "eval.log", ctx["gpu"], ctx["timeout"])
    paths = [folder / "out" / str(n) / "report.json" for n in range(len(configs))]
    if rc != 0 or not all(p.is_file() for p in paths):
        raise Failed(f"the evaluation worker failed (exit {rc})", tail(folder / "eval.log"),
                     f"read {folder / 'eval.log'}")
    base_report, report = (json.loads(p.read_text()) for p in paths)
    if report.get("device") != "cuda":
        raise Failed("the evaluation ran on the CPU", f"report.json says device {report.get('device')!r}",
                     "see engine/workers/mine_pairs.Student")

    def loss(r: dict):
        value = r["metrics"].get("loss")
        return value.get("value") if isinstance(value, dict) else value

    return {"device": report["device"], "examples": report["examples"], "contexts": report["contexts"],
            "loss": loss(report), "elapsed_s": report["elapsed_s"], "base_loss": loss(base_report),
            "base_elapsed_s": base_report["elapsed_s"], "models_in_one_worker": len(configs),
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


def check_attention(ctx: dict) -> dict:
    """engine/train/attention.varlen_sdpa on a packed row, both ways it can go on CUDA: torch's varlen kernel (one call)
    against the per-example sdpa loop (NIGHTSCHOOL_PACKED_ATTENTION=loop): the outputs and gradients must agree, and
    each is timed forward + backward over as many layers as SmolLM2-135M has (its 9 query / 3 key-value heads of 64)."""
    if not ctx["cuda"]:
        raise Skip("no CUDA GPU: the varlen kernel is CUDA-only (the per-example path is tested on CPU)")
    import os

    import torch

    from engine.train import attention

    class Layer(torch.nn.Module):
        num_key_value_groups, is_causal = 3, True

    gen = torch.Generator().manual_seed(0)
    lengths = [int(x) for x in torch.randint(40, 400, (24,), generator=gen)]
    bounds = torch.tensor([0] + list(itertools.accumulate(lengths)), dtype=torch.int32, device="cuda")
    tokens = int(bounds[-1])
    layer = Layer().cuda().train()

    def tensors():
        g = torch.Generator(device="cuda").manual_seed(1)
        return [torch.randn(1, h, tokens, 64, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
                for h in (9, 3, 3)]

    def run(mode: str, layers: int = 30) -> tuple[torch.Tensor, list[torch.Tensor], float, str]:
        os.environ[attention.SWITCH] = mode
        attention._kernel.cache_clear()
        q, k, v = tensors()
        kwargs = {"cu_seq_lens_q": bounds, "max_length_q": max(lengths)}
        out = attention.varlen_sdpa(layer, q, k, v, None, scaling=64 ** -0.5, **kwargs)[0]
        out.float().square().sum().backward()
        grads = [t.grad.clone() for t in (q, k, v)]
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(3):
            for _ in range(layers):
                o = attention.varlen_sdpa(layer, q, k, v, None, scaling=64 ** -0.5, **kwargs)[0]
                o.float().square().sum().backward()
        torch.cuda.synchronize()
        used = "kernel" if attention._kernel() is not None else "loop"
        return out.detach(), grads, (time.perf_counter() - started) / 3, used

    previous = os.environ.get(attention.SWITCH)
    try:
        loop_out, loop_grads, loop_s, _ = run("loop")
        kern_out, kern_grads, kern_s, used = run("")
    finally:
        if previous is None:
            os.environ.pop(attention.SWITCH, None)
        else:
            os.environ[attention.SWITCH] = previous
        attention._kernel.cache_clear()
    if used != "kernel":
        raise Skip("this torch has no torch.nn.attention.varlen (torch >= 2.10): packed rows take the per-example loop")
    diff = float((kern_out.float() - loop_out.float()).abs().max() / loop_out.float().abs().max())
    gdiff = max(float((a.float() - b.float()).abs().max() / (b.float().abs().max() + 1e-6))
                for a, b in zip(kern_grads, loop_grads))
    out = {"examples": len(lengths), "tokens": tokens, "max_rel_diff_out": round(diff, 5),
           "max_rel_diff_grads": round(gdiff, 5), "loop_ms_30_layers": round(loop_s * 1000, 2),
           "kernel_ms_30_layers": round(kern_s * 1000, 2), "speedup": round(loop_s / kern_s, 2)}
    if diff > 0.03 or gdiff > 0.03:  # relative to the largest value: a few bf16 steps
        raise Failed("the varlen kernel and the per-example loop disagree", json.dumps(out),
                     "see engine/train/attention._varlen (shapes, causal window, GQA)")
    return out
