"""Team mode's throughput on loopback: one member's upload (spool + send) in MB/s of transcripts, and the server's
ingest of 10 members sending at once, as ratios against solo capture of the same files in the same run, with the load.

    .venv/bin/python -m bench.bench_team [--mb 20] [--members 10]

Each member's transcripts are generated (bench_ingest's Claude Code corpus, a different seed per member) and captured
into the member's own data dir first (that is solo capture, the baseline); then the member spools its stored sessions
to its outbox and sends them to a real `nightschool team serve` subprocess on 127.0.0.1 with its own data dir. The
token travels in NIGHTSCHOOL_TEAM_TOKEN, so no keyring is touched."""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.bench_ingest import generate, load, ours

CODE_ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NIGHTSCHOOL_DATABASE_URL"}
    env.update(NIGHTSCHOOL_HOME=str(home), NIGHTSCHOOL_CONFIG=str(home.with_name(home.name + "-config")),
               PYTHONPATH=str(CODE_ROOT), **extra)
    return env


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "app.cli.main", *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=CODE_ROOT, check=False)
    if done.returncode:
        raise SystemExit(f"nightschool {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def _server(home: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli.main", "team", "serve", "--port", str(port),
                             "--api-only"],  # the API's ingest alone: no cycle of the school may start meanwhile
                            env=_env(home), cwd=CODE_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/v1/status", timeout=5).close()
            return proc, url
        except urllib.error.HTTPError:  # 401 without a member's token: it answers
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the team server did not answer within 60 s")


def _member(tmp: Path, name: str, megabytes: int, seed: int, url: str, server_home: Path) -> dict:
    """Generate, capture (solo), then spool: the member's data dir is ready to send. Seconds and sizes."""
    home = tmp / name
    home.mkdir(parents=True)
    files, size = generate(tmp / f"{name}-transcripts", megabytes, seed=seed)
    os.environ["NIGHTSCHOOL_HOME"] = str(home)
    from app.core.base.paths import data_dir

    capture_s = ours(files, tmp / f"{name}-transcripts", data_dir() / "nightschool.db")[0]
    token = json.loads(_cli(_env(server_home), "team", "invite", name, "--json"))["token"]
    team = home / "team"
    team.mkdir(parents=True, exist_ok=True)
    (team / "server.json").write_text(json.dumps({"url": url}))
    return {"name": name, "home": home, "mb": size / 1024**2, "capture_s": capture_s, "token": token}


SEND = ("import json, sys, time\n"
        "from app.core.base.store import Store\n"
        "from app.core.team import member\n"
        "store = Store(); t0 = time.perf_counter(); spooled = member.spool(store)\n"
        "print(json.dumps({'spool_s': time.perf_counter() - t0, 'spooled': spooled}), flush=True)\n"
        "sys.stdin.readline()\n"  # every member has spooled: the sends start together
        "t0 = time.perf_counter(); done = member.drain()\n"
        "print(json.dumps({'send_s': time.perf_counter() - t0, 'sent': done.sent_sessions, 'left': done.left_files,\n"
        "                  'problems': done.problems}), flush=True)\n")


def _send(members: list[dict]) -> tuple[list[dict], float]:
    """Each member spools in its own process; when all have, all send at once. Their timings, and the wall time from
    the go to the last send's end."""
    procs = [subprocess.Popen([sys.executable, "-c", SEND], env=_env(m["home"], NIGHTSCHOOL_TEAM_TOKEN=m["token"]),
                              cwd=CODE_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for m in members]
    spooled = [json.loads(proc.stdout.readline()) for proc in procs]
    started = time.perf_counter()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    sent = [json.loads(proc.stdout.readline()) for proc in procs]
    wall = time.perf_counter() - started
    for proc in procs:
        proc.wait(60)
    return [{**a, **b} for a, b in zip(spooled, sent)], wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=20, help="transcripts per member (MB)")
    parser.add_argument("--members", type=int, default=10)
    args = parser.parse_args()
    print(f"load average at start: {load()}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        server_home = tmp / "server"
        proc, url = _server(server_home)
        try:
            solo = _member(tmp, "m00", args.mb, 100, url, server_home)
            one = _send([solo])[0][0]
            send = one["spool_s"] + one["send_s"]
            print(f"one member, {solo['mb']:.1f} MB of transcripts: solo capture {solo['capture_s']:.1f} s "
                  f"({solo['mb'] / solo['capture_s']:.1f} MB/s); upload {send:.1f} s = spool {one['spool_s']:.1f} + "
                  f"send {one['send_s']:.1f} ({solo['mb'] / send:.1f} MB/s of transcripts; {one['sent']} sessions, "
                  f"{one['left']} files left); upload / capture time {send / solo['capture_s']:.2f}")
            crowd = [_member(tmp, f"m{i:02d}", args.mb, 100 + i, url, server_home) for i in range(1, args.members + 1)]
            got, wall = _send(crowd)
            total_mb = sum(m["mb"] for m in crowd)
            capture = sum(m["capture_s"] for m in crowd)
            sends = [g["send_s"] for g in got]
            print(f"{len(crowd)} members sending at once, {total_mb:.0f} MB of transcripts: {wall:.1f} s from the go "
                  f"to the last send's end (sends {min(sends):.1f}–{max(sends):.1f} s; spools before it, in parallel, "
                  f"{max(g['spool_s'] for g in got):.1f} s at most): server ingest {total_mb / wall:.1f} MB/s of "
                  f"transcripts; solo capture of the same files one after another {capture:.1f} s "
                  f"({total_mb / capture:.1f} MB/s); ratio server ingest / solo capture {capture / wall:.2f}; "
                  f"sessions sent {sum(g['sent'] for g in got)}, problems "
                  f"{sum(len(g['problems']) for g in got)}")
            asked = urllib.request.Request(f"{url}/v1/status", headers={"Authorization": f"Bearer {solo['token']}"})
            status = json.loads(urllib.request.urlopen(asked, timeout=30).read())  # members only
            print(f"server holds {sum(status['sessions_per_member'].values())} sessions from "
                  f"{len(status['sessions_per_member'])} members")
        finally:
            proc.kill()
            proc.wait()
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
