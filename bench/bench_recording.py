"""Recording overhead: the same requests to the built-in server with the experience buffer on vs off (same server)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = [{"type": "function", "function": {"name": name, "description": f"{name} a file or run a command",
                                           "parameters": {"type": "object", "required": [arg],
                                                          "properties": {arg: {"type": "string"}}}}}
         for name, arg in (("Read", "file_path"), ("Edit", "file_path"), ("Bash", "command"), ("Grep", "pattern"))]
SYSTEM = ("You are a coding agent working in /home/dev/project. Use the tools to read, edit and test code. "
          "Answer briefly. ") * 8
ASKS = ["Fix the failing test in utils.py", "What does parse_args return?", "Run the test suite",
        "Rename the function load to read_config", "Why does the build fail with exit code 2?",
        "Add a docstring to main()", "Find where the API key is read", "List the files in src/",
        "Explain the retry loop in client.py", "Deploy with AWS key AKIAQ2WERTY7UIOPASDF and DB_PASSWORD=hunter2pw"]


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def requests_for(n: int, max_tokens: int) -> list[dict]:
    """N agent-like chat requests (a system prompt of ~1.2 KB, four tools, one ask each; one in ten plants secrets)."""
    return [{"messages": [{"role": "system", "content": SYSTEM},
                          {"role": "user", "content": f"{ASKS[i % len(ASKS)]} (task {i})"}],
             "tools": TOOLS, "max_tokens": max_tokens, "temperature": 0.0, "seed": 1} for i in range(n)]


def post(base: str, key: str, body: dict) -> tuple[float, bytes, str | None]:
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}",
                                          "X-Nightschool-Client": "bench"})
    started = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as resp:
        data = resp.read()
        return time.perf_counter() - started, data, resp.headers.get("X-Nightschool-Experience")


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered)) - 1))]


def warm_up(base: str, key: str, reqs: list[dict], least: int, most: int = 60) -> list[float]:
    """Requests until three in a row take under 1.5x the fastest so far (a fresh server answers its first requests
    slowly: 7-11 s each for up to ~30 s here, with or without recording)."""
    times: list[float] = []
    while len(times) < most:
        times.append(post(base, key, reqs[len(times) % len(reqs)])[0] * 1000)
        if len(times) >= max(least, 3) and all(t < 1.5 * min(times) for t in times[-3:]):
            break
    return times


def set_recording(store, on: bool) -> dict:
    from app.core.experience import config
    from app.core.ship import serving

    config.set_buffer(store, "enabled", on)
    code, status = serving.request("GET", "/nightschool/status")  # puts the setting in effect now
    assert code == 200 and status["recording"]["enabled"] is on, status
    return status["recording"]


def measure(base: str, key: str, store, reqs: list[dict], rounds: int) -> tuple[dict, list]:
    """Every request once per mode, in `rounds` chunks; each chunk runs off then on, or on then off (alternating)."""
    times: dict[str, list[float]] = {"off": [], "on": []}
    recorded = []
    size = -(-len(reqs) // rounds)
    for r in range(rounds):
        chunk = reqs[r * size:(r + 1) * size]
        for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
            set_recording(store, mode == "on")
            for body in chunk:
                seconds, data, exp_id = post(base, key, body)
                times[mode].append(seconds * 1000)
                if mode == "on":
                    recorded.append((body, data, exp_id))
    return times, recorded


def writer_cost(db: Path, recorded: list) -> list[float]:
    """What the writer does per entry (parse, scrub, store, flag), timed in this process on the same exchanges."""
    from engine.serve.recorder import Exchange, Recorder

    writer = Recorder(db)
    writer.open()
    writer.cfg = writer.cfg.model_copy(update={"enabled": True})
    out = []
    for i, (body, data, _) in enumerate(recorded):
        ex = Exchange(id=f"bench{i:027d}", route="chat", request=json.dumps(body).encode(), response=data,
                      started=time.time(), latency_ms=1.0, client_header="bench")
        started = time.perf_counter()
        assert writer.write(ex) == "recorded"
        out.append((time.perf_counter() - started) * 1000)
    return out


def summary(name: str, ms: list[float]) -> str:
    return (f"{name:>13}: median {statistics.median(ms):7.1f} ms   p99 {p99(ms):7.1f} ms   mean "
            f"{statistics.mean(ms):7.1f} ms   min {min(ms):6.1f}   max {max(ms):6.1f}   (n={len(ms)})")


def run(args, home: Path) -> None:
    os.environ["NIGHTSCHOOL_HOME"] = str(home)
    from app.core.base.fingerprint import sha256_file
    from app.core.base.store import Store
    from app.core.experience import buffer
    from app.core.ship import serving
    from engine.loading import embedded_gguf

    gguf = Path(args.model) if args.model else embedded_gguf()
    print(f"model {gguf.name}, {args.requests} requests x 2 modes, max_tokens {args.max_tokens}, "
          f"{args.rounds} rounds; load before {load()}")
    state = serving.start(serving.Model("bench", str(gguf), sha256_file(gguf)), port=0)
    base, key, store = f"http://{state['host']}:{state['port']}", serving.api_key(), Store()
    try:
        reqs = requests_for(args.requests, args.max_tokens)
        warm = warm_up(base, key, reqs, args.warmup)
        print(f"warm-up (not counted, {len(warm)} requests): " + ", ".join(f"{ms:.0f}" for ms in warm) + " ms")
        times, recorded = measure(base, key, store, reqs, args.rounds)
        serving.request("GET", f"/nightschool/experience/{recorded[-1][2]}")  # the writer is done with the last one
        stats = set_recording(store, True)
    finally:
        serving.stop()
    after = load()
    off, on = times["off"], times["on"]
    print(summary("recording off", off))
    print(summary("recording on", on))
    print(f"ratio on/off: median {statistics.median(on) / statistics.median(off):.3f}, "
          f"p99 {p99(on) / p99(off):.3f}; median difference {statistics.median(on) - statistics.median(off):+.1f} ms")
    print(f"recorder: {stats['recorded']} recorded, {stats['dropped']} dropped, {stats['failed']} failed; "
          f"{buffer.counts(store)['total']} rows in the buffer")
    first, *cost = writer_cost(home / "writer-cost.db", recorded)
    print(f"writer, per entry (off the request path: parse + scrub + store + flags): median "
          f"{statistics.median(cost):.2f} ms, p99 {p99(cost):.2f} ms (the first, with imports: {first:.0f} ms)")
    print(f"load average (1/5/15 min) after: {after}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=4, help="chunks, each run off then on (alternating order)")
    ap.add_argument("--warmup", type=int, default=5, help="requests sent first and not counted")
    ap.add_argument("--model", help="a GGUF to serve (default: the embedded SmolLM2-135M-Instruct)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ns-bench-rec-") as tmp:
        run(args, Path(tmp) / "home")


if __name__ == "__main__":
    main()
