"""Ship figures: our export worker vs a plain merge → convert → quantize script, and served tokens/s per quant."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTION = [{"role": "user", "content": "Explain step by step how a bicycle works."}]  # runs to max_tokens
DIRECT = r'''
import ctypes, json, os, subprocess, sys, time
base, adapter, out, conv = sys.argv[1:5]
marks = {"start": time.time()}
import llama_cpp
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).merge_and_unload()
hf = os.path.join(out, "hf")
model.save_pretrained(hf)
AutoTokenizer.from_pretrained(base).save_pretrained(hf)
marks["merge"] = time.time()
tools = os.path.dirname(conv)
env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(tools, "gguf-py"), tools]))
f16 = os.path.join(out, "model.f16.gguf")
with open(os.path.join(out, "convert.log"), "wb") as log:
    subprocess.run([sys.executable, conv, hf, "--outtype", "f16", "--outfile", f16], env=env, check=True,
                   stdout=log, stderr=subprocess.STDOUT)
marks["convert"] = time.time()
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
q4 = os.path.join(out, "model.q4_k_m.gguf")
assert llama_cpp.llama_model_quantize(f16.encode(), q4.encode(), ctypes.byref(params)) == 0
marks["quantize"] = time.time()
print(json.dumps(marks), flush=True)
'''


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def prepare(tmp: Path) -> tuple[Path, Path]:
    """The SmolLM2 HF folder and a random non-zero LoRA r16 adapter on it (no training: timing only); lora_B is scaled
    by 0.05 so the merged model still answers coherently (at full scale it ends its turn at once or rambles)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from engine.loading import materialise_embedded

    t0 = time.perf_counter()
    base = materialise_embedded(tmp / "models")
    print(f"SmolLM2 materialised in {time.perf_counter() - t0:.0f} s")
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(
        r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], init_lora_weights=False,
        task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.mul_(0.05)
    adapter = tmp / "adapter"
    model.save_pretrained(adapter)
    return base, adapter


def run_proc(cmd: list[str], timeout: float = 1200) -> tuple[float, str, str]:
    """(wall s, stdout, stderr) of a subprocess; killed if this process is interrupted."""
    started = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[1:3]} failed ({proc.returncode}): {(out + err)[-2000:]}")
    return started, out, err


def export(base: Path, adapter: Path, out: Path, quants: list[str], smoke: bool, models: Path) -> dict:
    """Our export worker as the app runs it: wall time, stage times from its progress envelopes, its result."""
    out.mkdir(parents=True)
    config = {"label": "bench", "name": "smol", "base_model": str(base), "adapter": str(adapter),
              "quants": quants, "lora": False, "smoke": smoke}
    spec = out.parent / f"{out.name}.spec.json"
    spec.write_text(json.dumps({"config": config, "out": str(out), "models_dir": str(models), "job": "bench"}))
    started, stdout, stderr = run_proc([sys.executable, "-m", "engine.workers.export", "--spec", str(spec)])
    ended = time.time()
    envs = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if errors := [e["body"] for e in envs if e["type"] == "error"]:
        raise SystemExit(f"the export failed: {errors[0]}")
    done = next(e["body"] for e in envs if e["type"] == "exported")
    return {"wall": ended - started, "stages": stages(envs, started, ended), "files": done["files"],
            "size": (out / done["files"][0]["file"]).stat().st_size, "fallbacks": fallbacks(stderr)}


def fallbacks(stderr: str) -> str:
    """llama.cpp's own count: 'N of M tensor(s) required fallback quantization' (K-quants need rows of 256k)."""
    found = re.findall(r"(\d+ of \d+) tensor\(s\) required fallback", stderr)
    return ", ".join(found) or "none reported"


def stages(envs: list[dict], started: float, ended: float) -> dict[str, float]:
    """Seconds per phase: from a phase's first progress envelope to the next phase's first; spawn + imports before
    the first, finish + exit after the last envelope."""
    firsts: dict[str, float] = {}
    for env in envs:
        if env["type"] == "progress":
            firsts.setdefault(env["body"]["phase"], env["ts"])
    marks = [("start", started), *firsts.items(), ("finish + exit", envs[-1]["ts"]), ("end", ended)]
    out = {"spawn + imports" if name == "start" else name: b - a for (name, a), (_, b) in zip(marks, marks[1:])}
    if "convert" in firsts and "quantize" in firsts:  # convert's span holds the template check: split it off
        convert_done = max(e["ts"] for e in envs if e["type"] == "progress" and e["body"]["phase"] == "convert")
        out["template check"] = firsts["quantize"] - convert_done
        out["convert"] = convert_done - firsts["convert"]
    return out


def direct(base: Path, adapter: Path, out: Path) -> dict:
    """The obvious plain script, in its own process: transformers + PEFT merge, llama.cpp's converter and quantizer."""
    from engine.workers import llama_tools

    out.mkdir(parents=True)
    script = out.parent / "direct.py"
    script.write_text(DIRECT)
    started, stdout, stderr = run_proc([sys.executable, str(script), str(base), str(adapter), str(out),
                                   str(llama_tools.converter())])
    ended = time.time()
    marks = json.loads(stdout.strip().splitlines()[-1])
    return {"wall": ended - started, "stages": {"spawn + imports + merge": marks["merge"] - started,
                                                "convert": marks["convert"] - marks["merge"],
                                                "quantize": marks["quantize"] - marks["convert"],
                                                "finish + exit": ended - marks["quantize"]},
            "size": (out / "model.q4_k_m.gguf").stat().st_size, "fallbacks": fallbacks(stderr)}


def compare(base: Path, adapter: Path, tmp: Path, repeats: int) -> None:
    ours, plain = [], []
    for i in range(repeats):
        print(f"pair {i + 1}/{repeats} (load {load()})", flush=True)
        ours.append(export(base, adapter, tmp / f"ours{i}", ["q4_k_m"], False, tmp / "models"))
        shutil.rmtree(tmp / f"ours{i}")
        plain.append(direct(base, adapter, tmp / f"direct{i}"))
        shutil.rmtree(tmp / f"direct{i}")
        print(f"  ours {ours[-1]['wall']:.1f} s, direct {plain[-1]['wall']:.1f} s, "
              f"ratio {ours[-1]['wall'] / plain[-1]['wall']:.3f}", flush=True)
    mo, md = (statistics.median(r["wall"] for r in rows) for rows in (ours, plain))
    print(f"\nexport to q4_k_m, {repeats} interleaved pairs, median wall (load now {load()}):")
    for name, rows, med in (("ours", ours, mo), ("direct", plain, md)):
        print(f"  {name:6} {med:7.1f} s   ({', '.join(format(r['wall'], '.1f') for r in rows)}); "
              f"q4_k_m file {rows[0]['size'] / 1e6:.1f} MB")
    print(f"  ratio ours / direct {mo / md:.3f} (target <= 1.1: {'met' if mo / md <= 1.1 else 'NOT met'})")
    print_stages("ours, median stage s", [r["stages"] for r in ours])
    print_stages("direct, median stage s", [r["stages"] for r in plain])
    print(f"  tensors llama.cpp quantized with a fallback type (q4_k_m): ours {ours[0]['fallbacks']}, "
          f"direct {plain[0]['fallbacks']}")


def print_stages(title: str, rows: list[dict[str, float]]) -> None:
    names = list(dict.fromkeys(k for row in rows for k in row))
    print(f"  {title}: " + ", ".join(f"{k} {statistics.median(r.get(k, 0.0) for r in rows):.1f}" for k in names))


def serve_all(base: Path, adapter: Path, tmp: Path, requests: int, max_tokens: int) -> None:
    """Export all four quants once (smoke-tested), then serve each file and time chat completions over HTTP."""
    from app.core.ship.config import QUANTS

    quants = list(QUANTS)
    done = export(base, adapter, tmp / "all", quants, True, tmp / "models")
    print(f"\nexport of {', '.join(quants)} with smoke tests: {done['wall']:.1f} s (load {load()}); stages: "
          + ", ".join(f"{k} {v:.1f}" for k, v in done["stages"].items()) + f"; fallbacks {done['fallbacks']}")
    rows = []
    for entry in done["files"]:
        rows.append({**entry, **serve_one(tmp / "all" / entry["file"], entry, requests, max_tokens)})
    print(f"\nserved by the built-in server, {requests} chat completions each (max_tokens {max_tokens}, "
          f"temperature 0), medians:")
    print(f"{'quant':8} {'MB':>6} {'serve tok/s':>11} {'tokens':>6} {'first s':>7} {'load s':>6} "
          f"{'smoke tok/s':>11} {'smoke load s':>12} {'load avg':>15}")
    for r in rows:
        print(f"{r['quant']:8} {r['size'] / 1e6:6.1f} {r['tps']:11.1f} {r['tokens']:6d} {r['first']:7.2f} "
              f"{r['server_load_s']:6.2f} {r['tokens_per_s']:11.1f} {r['load_s']:12.2f} {r['loadavg']:>15}")
    for r in rows:
        print(f"smoke {r['quant']}: {r['quant_type']}, ok {r['ok']} {r['why']} answer {r['answer'][:60]!r}")


def serve_one(path: Path, entry: dict, requests: int, max_tokens: int) -> dict:
    from app.core.ship import serving as server

    st = server.start(server.Model("bench-" + entry["quant"], str(path), entry["sha256"], entry["quant"]), port=0)
    try:
        walls, tps, tokens = [], [], []
        for _ in range(requests):
            t0 = time.perf_counter()
            body = server.chat(QUESTION, max_tokens=max_tokens, temperature=0.0)
            walls.append(time.perf_counter() - t0)
            tokens.append(body["usage"]["completion_tokens"])
            tps.append(tokens[-1] / walls[-1])
    finally:
        server.stop()
    return {"tps": statistics.median(tps), "tokens": int(statistics.median(tokens)), "first": walls[0],
            "server_load_s": st["current"]["load_s"], "loadavg": load()}


def leftovers(tmp: Path) -> list[str]:
    """Our engine processes (worker or server) still running: their command lines name the temp dir."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()
    return [line.strip() for line in out if "-m engine" in line and str(tmp) in line]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--skip-compare", action="store_true", help="only the served tokens/s")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load average (1/5/15 min) {load()}")
    with tempfile.TemporaryDirectory(prefix="bench_ship") as name:
        tmp = Path(name)
        os.environ["NIGHTSCHOOL_HOME"] = str(tmp / "home")
        try:
            base, adapter = prepare(tmp)
            if not args.skip_compare:
                compare(base, adapter, tmp, args.repeats)
            serve_all(base, adapter, tmp, args.requests, args.max_tokens)
        finally:
            from app.core.ship import serving as server

            server.stop()
            if left := leftovers(tmp):
                print("left running (killing):", *left, sep="\n  ")
                for line in left:
                    os.kill(int(line.split()[0]), 9)
    print(f"load average at the end {load()}")


if __name__ == "__main__":
    main()
