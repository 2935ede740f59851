"""The README's commands, run as written on a fresh machine state: a fresh HOME and data dir, no display, the embedded
defaults (SmolLM2 + SQLite); it is also the suite's one test of the real default model materialised and trained. Every command line in README.md's code blocks is either run here (RUN: the line itself,
or, for a synopsis, the concrete lines that stand for it) or named in NOT_RUN with the reason; a line in neither fails,
so the README and the product cannot drift apart. The first run (`nightschool`, then `nightschool --headless
--demo-only`) trains the real SmolLM2 once and every later case shares that data dir."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.readme import README, Command, commands

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = README.parent
BIN = Path(sys.executable).parent  # the venv's nightschool
FIXTURE = Path(os.environ.get("NIGHTSCHOOL_SHARED", ROOT.parent / "shared")) / "fixtures" / "real-world"
MAIN = "bash packaging/install.sh && .venv/bin/nightschool"

# README line -> (group, the lines run for it). "=" runs the README line as written; "!" in front of a line: a refusal
# is expected (non-zero exit, a sentence, no traceback). {job} / {ckpt} / {fixture} / {sample} are filled in from the
# first run's data dir. Lines of one group run in this order in one test.
AS_WRITTEN = "="
RUN: dict[str, tuple[str, list[str]] | list[tuple[str, list[str]]]] = {
    MAIN: ("first run", [".venv/bin/nightschool  (the test_main_command_* tests)"]),
    # jobs and the queue, on the first run's completed job
    "nightschool jobs": ("jobs", [AS_WRITTEN, "nightschool jobs --json"]),
    "nightschool attach JOB": ("jobs", ["nightschool attach {job}"]),
    "nightschool pause|resume|stop|checkpoint JOB": ("jobs", ["!nightschool pause {job}", "!nightschool stop {job}"]),
    "nightschool train FILE.jsonl [--recipe sft|dpo|orpo|kto|grpo|rloo] [--method lora|qlora|full] [--model PATH_OR_ID] "
    "[--max-steps N] [--epochs E] [--eval HELDOUT.jsonl] [--dry-run] [--detach]":
        ("jobs", ["!nightschool train {sample} --recipe dpo --dry-run",  # chat lines are not preference pairs
                  "!nightschool train no-such-file.jsonl"]),
    "nightschool queue add FILE [--priority high|normal|low] [--recipe R] [--dry-run]":
        ("jobs", ["nightschool queue add {sample} --priority low --dry-run"]),
    "nightschool queue list | run [--watch] | pause [JOB] | resume [JOB] | stop JOB | cancel JOB":
        ("jobs", ["nightschool queue list", "nightschool queue pause", "nightschool queue resume",
                  "nightschool queue list --json"]),
    "nightschool queue retry JOB [--fresh] | move JOB --top|--before JOB2 | priority JOB P | concurrent [N]":
        ("jobs", ["nightschool queue concurrent", "nightschool queue concurrent 1"]),
    "nightschool checkpoints": ("jobs", [AS_WRITTEN, "nightschool checkpoints --json"]),
    "nightschool lineage '#15'": ("jobs", ["nightschool lineage '{ckpt}'"]),
    "nightschool rollback": ("jobs", ["!" + AS_WRITTEN]),  # nothing was deployed: said, not a traceback
    "nightschool serve [start|status|stop]": ("jobs", ["nightschool serve status"]),
    "nightschool exports | deployments": ("jobs", ["nightschool exports", "nightschool deployments"]),
    # on the fresh HOME (the server stopped: the live check says so, the config is still written)
    "nightschool connect [AGENT] [--dry-run] [--json]":
        ("jobs", ["nightschool connect codex --dry-run", "nightschool connect codex", "nightschool connect",
                  "nightschool connect --json"]),
    "nightschool disconnect AGENT": ("jobs", ["nightschool disconnect codex", "!nightschool disconnect codex"]),
    "nightschool queue remote ray.address http://GPU-BOX:8265": ("jobs", [AS_WRITTEN]),
    "nightschool queue remote ray.storage /mnt/shared/ns": ("jobs", [AS_WRITTEN]),
    "nightschool queue remote skypilot.bucket s3://my-ns-checkpoints": ("jobs", [AS_WRITTEN]),
    "nightschool queue remote skypilot.accelerators L4:1": ("jobs", [AS_WRITTEN, "nightschool queue remote"]),
    # capture and datasets, on a folder of real transcripts
    "nightschool capture import PATH...": ("data", ["nightschool capture import {fixture}"]),
    "nightschool capture status": ("data", [AS_WRITTEN, "nightschool capture status --json"]),
    "nightschool capture scan": ("data", [AS_WRITTEN]),
    "nightschool dataset build [--model M] [--mode auto|full|incremental] [--max-length N] [filters…]":
        ("data", ["nightschool dataset build --mode full --max-length 1024"]),
    "nightschool dataset list": ("data", [AS_WRITTEN]),
    "nightschool dataset show NAME [--example ID|N]": ("data", ["nightschool dataset show {dataset} --example 0"]),
    "nightschool dataset validate NAME|FILE [--model M] [--quick]":
        ("data", ["nightschool dataset validate {dataset} --quick"]),
    "nightschool hooks install|uninstall|status": ("data", ["nightschool hooks status", "nightschool hooks install",
                                                            "nightschool hooks status", "nightschool hooks uninstall"]),
    # the school, the store, experience, MCP
    "nightschool school status | now | pause | resume | history [N] | show ID | approve ID | refuse ID":
        [("school", ["nightschool school status", "nightschool school status --json", "nightschool school pause",
                     "nightschool school resume", "nightschool school history 5", "!nightschool school show 99"]),
         ("scratch", ["!nightschool school now"])],  # nothing captured there: nothing new to learn
    "nightschool school policy [KEY [VALUE]]": ("school", ["nightschool school policy",
                                                           "nightschool school policy min_sessions 40",
                                                           "nightschool school policy min_sessions"]),
    "nightschool school students [--measure REF]": ("school", ["nightschool school students"]),
    "nightschool daemon [run] | status | stop | install | uninstall": ("school", ["nightschool daemon status"]),
    "nightschool store where": ("school", [AS_WRITTEN]),
    "nightschool judge blind --results [--json]": ("school", ["nightschool judge blind --results",
                                                              "nightschool judge blind --results --json"]),
    # no teacher configured on the fresh machine: refused with the reason before anything is drawn
    "nightschool judge blind --judge teacher [--n 20]": ("school", ["!nightschool judge blind --judge teacher --n 2"]),
    "nightschool mcp token": ("school", [AS_WRITTEN]),
    "nightschool experience on | off | settings [KEY VALUE]":
        ("school", ["nightschool experience settings", "nightschool experience on", "nightschool experience off"]),
    "nightschool experience list [--state flagged] [--reason KIND] | show ID [--json]":
        ("school", ["nightschool experience list --state flagged", "!nightschool experience show 99"]),
    "nightschool experience teacher usage [--json]": ("school", [AS_WRITTEN, "nightschool experience teacher usage --json"]),
    "nightschool experience teacher [KEY VALUE]": ("school", ["nightschool experience teacher"]),
    # a team server's members, in a scratch server data dir of their own
    # a scratch data dir of its own: nothing captured (a cycle is refused), a team server's members
    "nightschool team invite alice": ("scratch", [AS_WRITTEN]),
    "nightschool team members": ("scratch", [AS_WRITTEN]),
    "nightschool team revoke alice": ("scratch", [AS_WRITTEN]),
}

# README line -> why this test does not run it, and what does
NOT_RUN: dict[str, str] = {
    "bash packaging/install.sh --dev && .venv/bin/python -m pytest": "the test command itself (.ci/run runs it)",
    "bash packaging/build.sh": "builds the bundle, .deb and tar.gz (minutes): tests/packaging/test_bundle.py builds them",
    "ray start --head --dashboard-host 0.0.0.0": "a GPU box's Ray head; tests/ray_head.py starts a real local one "
                                                 "(loopback) for tests/core/train/test_ray_backend.py",
    "sky check": "needs a cloud's credentials or an SSH node pool; the SkyPilot task is validated by "
                 "tests/core/train/test_skypilot_backend.py",
    "pip install 'nightschool[postgres]'": "the network (the dev install already has psycopg)",
    "export NIGHTSCHOOL_DATABASE_URL=postgresql+psycopg://ns:PASSWORD@db-host:5432/nightschool":
        "a database host; tests/pg.py starts a real PostgreSQL and the store tests name it the same way",
    "nightschool store migrate --to \"$NIGHTSCHOOL_DATABASE_URL\" --from ~/.local/share/nightschool/nightschool.db":
        "needs a PostgreSQL server: tests/core/base/test_transfer.py migrates a store into a real one",
    "nightschool eval '#12'": "judging SmolLM2 takes minutes: tests/core/judge (the tiny model) and "
                              "test_gate_smollm2.py (the real one) run eval, compare and promote",
    "nightschool compare base '#12' '#15'": "as eval: tests/core/judge/test_promote_flow.py",
    "nightschool promote '#15'": "as eval: tests/core/judge/test_gate_smollm2.py",
    "nightschool deploy '#15' [--quant q4_k_m|q5_k_m|q8_0|f16]":
        "GGUF conversion and a server (minutes): tests/core/ship/test_ship_flow.py",
    "nightschool export '#15' --quant q4_k_m --quant q8_0 [--ollama NAME] [--lmstudio [DIR]]":
        "as deploy: tests/core/ship/test_ship_flow.py and test_ollama.py",
    "nightschool judge blind [--model '#15'] [--n 20]":
        "interactive, a key per trial: tests/cli/test_blind_cli.py drives it through a pseudo-terminal (stop, go on)",
    "nightschool mcp": "a stdio server for an agent: tests/mcp/test_mcp.py drives it with the MCP SDK's client",
    "nightschool mcp --http [--port N]": "a long-running HTTP server: tests/mcp/test_mcp.py",
    "nightschool experience correct-now [--limit N] | accept CORRECTION | reject CORRECTION [--reason TEXT]":
        "needs a teacher's hosted API: tests/core/experience (a local stand-in server)",
    "printf %s \"$KEY\" | nightschool experience teacher key --stdin": "a real teacher key; tests/cli and "
                                                                        "tests/core/experience/test_teacher.py",
    "nightschool team serve --port 8790": "a long-running server: tests/core/team (a real server on a free port)",
    "nightschool team join https://school.example.org": "a team server on the network: tests/core/team",
    "nightschool team push": "a joined team server: tests/core/team",
    "nightschool team retry 60": "a joined data dir: tests/core/team",
    "nightschool team withdraw": "a joined team server: tests/core/team",
}

TRACEBACK = "Traceback (most recent call last)"


def accounted(found: list[Command]) -> list[Command]:
    """The README commands that neither RUN nor NOT_RUN names (they fail the test)."""
    return [c for c in found if c.text not in RUN and c.text not in NOT_RUN]


def fresh_env(tmp: Path) -> dict[str, str]:
    """A new user's environment: their own HOME and data dir, no display, no keyring, no hub."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "NIGHTSCHOOL_DATABASE_URL",
                                                            "CLAUDE_CONFIG_DIR", "CODEX_HOME", "RAY_ADDRESS")}
    env.update(HOME=str(tmp / "user"), NIGHTSCHOOL_HOME=str(tmp / "user" / ".local/share/nightschool"),
               NIGHTSCHOOL_CONFIG=str(tmp / "user" / ".config/nightschool"), PATH=f"{BIN}:{env.get('PATH', '')}",
               PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    (tmp / "user").mkdir(parents=True, exist_ok=True)
    return env


def shell(line: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def run_main_until_school(env: dict, timeout: float = 1200) -> tuple[int, str]:
    """`.venv/bin/nightschool` as the README's first command runs it; once the school runs in the foreground, Ctrl-C."""
    proc = subprocess.Popen([".venv/bin/nightschool" if (ROOT / ".venv").is_dir() else str(BIN / "nightschool")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        for line in proc.stdout:
            lines.append(line)
            if "daemon running: pid" in line:  # the runtime took the data dir: the school runs
                proc.send_signal(signal.SIGINT)
            if time.monotonic() > deadline:
                break
        return proc.wait(timeout=120), "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> dict:
    """The README's first command on a fresh machine state (the demo trains SmolLM2, then the school starts and is
    stopped), then `nightschool --headless --demo-only` on the same data dir; the cases share what they made."""
    tmp = tmp_path_factory.mktemp("readme")
    env = fresh_env(tmp)
    started = time.monotonic()
    code, out = run_main_until_school(env)
    print(f"\n`nightschool` (demo, then the school until Ctrl-C): {time.monotonic() - started:.0f} s")
    demo = shell("nightschool --headless --demo-only", env, timeout=1200)
    import json

    jobs = json.loads(shell("nightschool jobs --json", env).stdout)
    ckpts = json.loads(shell("nightschool checkpoints --json", env).stdout)
    print(f"`nightschool` + `nightschool --headless --demo-only`: {time.monotonic() - started:.0f} s")
    return {"env": env, "tmp": tmp, "main": (code, out), "demo": demo, "jobs": jobs, "ckpts": ckpts}


def test_the_main_command_trains_the_demo_then_runs_the_school_until_ctrl_c(first_run):
    code, out = first_run["main"]
    assert TRACEBACK not in out, out
    assert code == 0, out
    assert "Running headless" in out and "Starting the night school in the foreground" in out, out
    assert out.index("Running headless") < out.index("Starting the night school"), out
    assert "stopping (SIGINT)" in out, out
    assert "re-materialising a trainable model" in out  # progress while the embedded model became a trainable copy
    import json

    cached = Path(first_run["env"]["NIGHTSCHOOL_HOME"]) / "models" / "smollm2-135m-instruct"
    config = json.loads((cached / "config.json").read_text())
    assert "quantization_config" not in config and config["hidden_size"] == 576
    assert (cached / "model.safetensors").stat().st_size > 400e6  # plain fp32 weights, not the 98 MB GGUF


def test_headless_demo_only_completes_a_job_without_a_traceback(first_run):
    demo = first_run["demo"]
    assert demo.returncode == 0 and TRACEBACK not in demo.stdout + demo.stderr, demo.stdout + demo.stderr
    assert "Starting the night school" not in demo.stdout
    jobs = first_run["jobs"]
    assert len(jobs) == 2 and all(j["state"] == "completed" for j in jobs), jobs
    assert all(j["source"] == "cli" and j["model_ref"] == "default" for j in jobs), jobs
    assert len(first_run["ckpts"]) >= 2, first_run["ckpts"]
    import json

    events = [json.loads(line) for line in (Path(first_run["env"]["NIGHTSCHOOL_HOME"]) / "runs" / jobs[0]["id"]
                                            / "events.jsonl").read_text().splitlines()]
    losses = [e["body"]["loss"] for e in events if e["type"] == "metrics"]
    assert len(losses) == 20 and sum(losses[-3:]) / 3 < sum(losses[:3]) / 3, losses  # the sample is learnt


def fill(line: str, first_run: dict, readme_line: str, state: dict) -> str:
    if line == AS_WRITTEN or line == "!" + AS_WRITTEN:
        line = line.replace(AS_WRITTEN, readme_line)
    values = {"job": first_run["jobs"][0]["id"], "ckpt": f"#{first_run['ckpts'][0]['id']}", "fixture": str(FIXTURE),
              "sample": "resources/sample_chat.jsonl", "dataset": state.get("dataset", "")}
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], line)


def run_group(group: str, first_run: dict, env: dict, state: dict | None = None) -> list[str]:
    state = {} if state is None else state
    ran = []
    for readme_line, runs in RUN.items():
        lines = [line for name, group_lines in ([runs] if isinstance(runs, tuple) else runs) if name == group
                 for line in group_lines]
        for line in lines:
            refused = line.startswith("!")
            cmd = fill(line.removeprefix("!"), first_run, readme_line, state)
            done = shell(cmd, env)
            out = done.stdout + done.stderr
            assert TRACEBACK not in out, f"$ {cmd}\n{out}"
            if refused:
                assert done.returncode != 0 and done.stderr.strip(), f"$ {cmd} should refuse\n{out}"
            else:
                assert done.returncode == 0, f"$ {cmd} -> {done.returncode}\n{out}"
            if cmd.startswith("nightschool dataset build"):
                state["dataset"] = re.search(r"^(\S+): \d+ examples", done.stdout, re.M).group(1)
            ran.append(cmd)
    return ran


def test_job_queue_checkpoint_and_shipping_commands(first_run):
    ran = run_group("jobs", first_run, first_run["env"])
    assert "nightschool rollback" in ran


def test_capture_and_dataset_commands_on_real_transcripts(first_run):
    if not FIXTURE.is_dir():
        pytest.skip(f"the shared real-world fixtures are not at {FIXTURE}")
    state: dict = {}
    run_group("data", first_run, first_run["env"], state)
    import json

    status = json.loads(shell("nightschool capture status --json", first_run["env"]).stdout)
    assert status, status
    listed = shell("nightschool dataset list", first_run["env"]).stdout
    assert state["dataset"] in listed


def test_school_store_experience_and_mcp_commands(first_run):
    run_group("school", first_run, first_run["env"])


def test_a_scratch_data_dir_refuses_a_cycle_and_keeps_a_team_servers_members(tmp_path, first_run):
    env = fresh_env(tmp_path)
    run_group("scratch", first_run, env)
    members = shell("nightschool team members", env).stdout
    assert "alice" in members and "revoked" in members, members
    assert "nothing new" in shell("nightschool school now", env).stderr.lower()


def test_every_readme_command_is_run_or_excused():
    found = commands()
    assert len(found) > 40, found  # the reader found the README's commands
    assert not accounted(found), "README commands neither run nor excused here:\n" + "\n".join(
        f"README.md:{c.line}: {c.text}" for c in accounted(found))
    texts = {c.text for c in found}
    stale = [t for t in (*RUN, *NOT_RUN) if t not in texts]
    assert not stale, f"no longer in the README (update the tables): {stale}"
    assert not set(RUN) & set(NOT_RUN)


def test_a_command_added_to_the_readme_without_a_test_fails(tmp_path):
    planted = tmp_path / "README.md"
    text = README.read_text(encoding="utf-8")
    planted.write_text(text.replace("    nightschool jobs\n", "    nightschool jobs\n    nightschool frobnicate --now\n"),
                       encoding="utf-8")
    missing = accounted(commands(planted))
    assert [c.text for c in missing] == ["nightschool frobnicate --now"], missing


def _subparser(parser, words: list[str]):
    """The parser of the deepest subcommand the words name, and how many words that took."""
    import argparse

    used = 0
    for word in words:
        subs = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if subs is None or word.split("|")[0] not in subs.choices:
            break
        parser, used = subs.choices[word.split("|")[0]], used + 1
    return parser, used


def test_every_command_the_readme_shows_has_help_and_the_options_it_names():
    """`--help` of every command the README shows exits 0, and each `--option` the README writes is one it takes."""
    from app.cli.main import build_parser

    root = build_parser()
    helped, unknown = set(), []
    for command in commands():
        if not command.text.split()[0].endswith("nightschool"):
            continue
        words = command.text.replace(" || ", " ").split()[1:]
        head, used = _subparser(root, words)
        prefix = words[:max(used - 1, 0)] if used else []
        for n, segment in enumerate(" ".join(words).split(" | ")):
            parser, _ = _subparser(root, (prefix if n else []) + segment.split())
            options = {o for a in parser._actions for o in a.option_strings}
            for word in re.findall(r"--[a-z][a-z-]*", segment):
                if word not in options:
                    unknown.append(f"README.md:{command.line}: {word} in `{segment}` ({parser.prog})")
            if parser.prog not in helped:
                with pytest.raises(SystemExit) as ended:
                    parser.parse_args(["--help"])
                assert ended.value.code == 0
                helped.add(parser.prog)
    assert not unknown, "\n".join(unknown)
    assert len(helped) >= 40, sorted(helped)
