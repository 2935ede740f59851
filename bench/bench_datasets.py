"""Dataset build throughput on generated agent sessions vs a plain convert + apply_chat_template loop; tokens per
example; padding saved by packing.

    .venv/bin/python -m bench.bench_datasets [--sessions 10000] [--quick] [--max-length 2048] [--profile]
    .venv/bin/python bench/bench_datasets.py --quick

Sessions are generated as `capture.model.Session` objects (Claude Code shape: thinking, text and tool calls in one
assistant message, tool results in a `tool` message) and stored through `capture.rows.session_rows`, so the rows,
parts JSON, signals, outcome and tool-call counts are exactly what capture writes. The build runs in-process with the
real tokenizer (SmolLM2-135M-Instruct, or a small BPE tokenizer built on the spot when that folder is missing).
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import hashlib
import io
import json
import os
import pstats
import random
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/bench_datasets.py` as well as `python -m bench.bench_datasets`
    sys.path.insert(0, str(ROOT))

SMOLLM2 = Path.home() / ".local/share/nightschool/models/smollm2-135m-instruct"
MODEL = "claude-sonnet-4-5"

# --- words --------------------------------------------------------------------------------------------------------
PROSE = ("the a this that it we I should need to check first then next so because when if but and or not with from "
         "into for on in of at by as is are was be been has have will can could would might must also only still "
         "function method class module package import config setting value default option argument parameter return "
         "error exception failure warning bug issue fix change update refactor rename move remove add test tests "
         "suite case fixture assertion mock stub coverage build compile run runs running script command output log "
         "logs file files path directory folder project repository branch commit diff patch merge review request "
         "response handler route endpoint server client database query table column index migration schema model "
         "field record row cache session user token parser lexer stream buffer queue worker thread process timeout "
         "retry limit size length count number list dict string integer type types typing annotation docstring "
         "comment line lines loop variable constant helper utility wrapper decorator context manager async await "
         "event callback signal slot widget window layout render template view state store reducer action hook "
         "component props style theme color font icon button label input form validation error message").split()
IDENTS = ("user_id session_id parse_args load_config build_index run_tests get_item set_value to_dict from_json "
          "handle_request validate_input compute_hash read_file write_file open_db close_db retry_after cache_key "
          "make_client fetch_rows apply_patch format_date normalize_path split_lines merge_dicts resolve_ref "
          "Settings Config Parser Handler Worker Store Session Client Router Model Schema Builder Registry").split()
FILES = ("src/app/main.py src/app/config.py src/app/models.py src/app/routes.py src/app/db.py src/app/utils.py "
         "src/app/cli.py src/app/cache.py src/app/auth.py src/app/worker.py tests/test_main.py tests/test_config.py "
         "tests/test_routes.py tests/conftest.py web/src/App.tsx web/src/components/Table.tsx web/src/api.ts "
         "pyproject.toml README.md Makefile docs/setup.md scripts/deploy.sh").split()
OPENERS = ("Let me look at", "I'll check", "Now let me read", "Let me run", "Next I'll update", "Let me search for",
           "First, let me inspect", "I'll fix", "Let me verify", "Then I'll run")
CORRECTIONS = ("Actually, the problem is elsewhere.", "Wait, that path is wrong.", "Let me try again with the right "
               "argument.", "My mistake: the test imports the old name.")
MARKERS = ("First", "Then", "Next", "Finally", "After that")


def prose(rng: random.Random, n: int) -> str:
    words = rng.choices(PROSE, k=max(1, n))
    words[0] = words[0].capitalize()
    for i in range(9, len(words), rng.randint(8, 16)):
        words[i] = rng.choice(IDENTS) + "."
    return " ".join(words) + "."


def code_lines(rng: random.Random, n: int, numbered: bool = False, start: int = 1) -> str:
    out = []
    for i in range(n):
        indent = "    " * rng.choice((0, 1, 1, 2, 2, 3))
        kind = rng.random()
        if kind < 0.15:
            line = f"def {rng.choice(IDENTS).lower()}({rng.choice(PROSE)}, {rng.choice(PROSE)}=None):"
        elif kind < 0.45:
            line = f"{rng.choice(IDENTS).lower()} = {rng.choice(IDENTS)}({rng.choice(PROSE)}, {rng.randint(0, 999)})"
        elif kind < 0.6:
            line = f"# {prose(rng, rng.randint(4, 12))}"
        elif kind < 0.75:
            line = f"if {rng.choice(PROSE)} is not None and {rng.choice(IDENTS).lower()}:"
        elif kind < 0.85:
            line = f"return {{\"{rng.choice(PROSE)}\": {rng.choice(IDENTS).lower()}, \"n\": {rng.randint(0, 99)}}}"
        else:
            line = ""
        line = indent + line if line else line
        out.append(f"{start + i:6d}\t{line}" if numbered else line)
    return "\n".join(out)


# --- sessions -----------------------------------------------------------------------------------------------------
@dataclass
class Clock:
    t: float

    def tick(self, rng: random.Random, lo: float = 2, hi: float = 40) -> str:
        self.t += rng.uniform(lo, hi)
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.t)) + f".{int(self.t * 1000) % 1000:03d}Z"


@dataclass
class Plan:
    """What one generated session looks like (drawn from its own seed, so a near-duplicate can redraw it)."""

    steps: int
    turns: int
    outcome: str  # finished | abandoned | errored | chat
    subagent: bool
    meta: bool
    summary: bool
    rewind: bool


def draw_plan(rng: random.Random) -> Plan:
    """Long-tailed: median ~5 tool steps (~14 messages), p99 ~34 steps (~75 messages), cap 38 steps."""
    steps = max(1, min(38, int(rng.lognormvariate(1.6, 0.75))))
    r = rng.random()
    outcome = "chat" if r < 0.04 else "abandoned" if r < 0.10 else "errored" if r < 0.13 else "finished"
    turns = 1 if rng.random() < 0.7 else rng.choice((2, 2, 3, 4))
    return Plan(steps=0 if outcome == "chat" else steps, turns=min(turns, max(1, steps)), outcome=outcome,
                subagent=rng.random() < 0.04, meta=rng.random() < 0.10, summary=rng.random() < 0.01,
                rewind=rng.random() < 0.02)


def tool_input(rng: random.Random, tool: str) -> dict:
    path = "~/work/shop/" + rng.choice(FILES)
    if tool == "Read":
        return {"file_path": path, **({"offset": rng.randint(1, 400), "limit": 200} if rng.random() < 0.2 else {})}
    if tool == "Bash":
        cmd = rng.choice(("pytest -q tests/", "python -m pytest -x -k {}", "git diff --stat", "git status",
                          "ruff check src/", "npm test -- --watch=false", "ls -la src/app", "make build",
                          "python -c 'import app; print(app.__version__)'", "grep -rn {} src/"))
        return {"command": cmd.format(rng.choice(IDENTS).lower()), "description": prose(rng, rng.randint(3, 8))}
    if tool == "Edit":
        return {"file_path": path, "old_string": code_lines(rng, rng.randint(1, 6)),
                "new_string": code_lines(rng, rng.randint(1, 8))}
    if tool == "Write":
        return {"file_path": path, "content": code_lines(rng, rng.randint(10, 60))}
    if tool == "Grep":
        return {"pattern": rng.choice(IDENTS), "path": "~/work/shop/src", "output_mode": "content", "-n": True}
    if tool == "Glob":
        return {"pattern": rng.choice(("**/*.py", "src/**/*.ts", "tests/test_*.py", "**/*.md"))}
    if tool == "TodoWrite":
        return {"todos": [{"content": prose(rng, rng.randint(3, 9)), "status": rng.choice(("pending", "in_progress",
                                                                                             "completed")),
                           "activeForm": prose(rng, 4)} for _ in range(rng.randint(2, 6))]}
    return {}


def tool_output(rng: random.Random, tool: str, inp: dict) -> str:
    r = rng.random()
    lines = rng.randint(1, 15) if r < 0.55 else rng.randint(15, 80) if r < 0.92 else rng.randint(150, 900)
    if tool == "Read":
        return code_lines(rng, lines, numbered=True, start=inp.get("offset", 1))
    if tool == "Bash":
        if "pytest" in inp["command"]:
            dots = "".join(rng.choice("....F.s") for _ in range(min(lines * 8, 400)))
            return f"{dots}\n{prose(rng, 12)}\n{rng.randint(3, 300)} passed, {rng.randint(0, 3)} skipped in " \
                   f"{rng.uniform(0.2, 30):.2f}s"
        return "\n".join(prose(rng, rng.randint(4, 14)) for _ in range(lines))
    if tool == "Edit":
        return f"The file {inp['file_path']} has been updated. Here's the result of running `cat -n` on a snippet " \
               f"of the edited file:\n" + code_lines(rng, min(lines, 12), numbered=True, start=rng.randint(1, 300))
    if tool == "Write":
        return f"File created successfully at: {inp['file_path']}"
    if tool == "Grep":
        return "\n".join(f"{rng.choice(FILES)}:{rng.randint(1, 500)}:{code_lines(rng, 1).strip()}"
                         for _ in range(min(lines, 60)))
    if tool == "Glob":
        return "\n".join("~/work/shop/" + rng.choice(FILES) for _ in range(min(lines, 40)))
    return "Todos have been modified successfully. Ensure that you continue to use the todo list to track your " \
           "progress. Please proceed with the current tasks if applicable"


def tool_error(rng: random.Random, tool: str, inp: dict) -> str:
    if tool == "Bash":
        frames = "\n".join(f'  File "~/work/shop/{rng.choice(FILES)}", line {rng.randint(1, 400)}, in '
                           f"{rng.choice(IDENTS).lower()}\n    {code_lines(rng, 1).strip()}"
                           for _ in range(rng.randint(2, 12)))
        return f"Exit code 1\nTraceback (most recent call last):\n{frames}\n{rng.choice(IDENTS)}Error: " \
               f"{prose(rng, 8)}"
    if tool == "Read":
        return "File does not exist. Current working directory: ~/work/shop"
    if tool == "Edit":
        return "String to replace not found in file.\nString: " + inp.get("old_string", "")[:200]
    return f"<tool_use_error>{prose(rng, 10)}</tool_use_error>"


class Gen:
    """Builds Session objects; call ids and agent ids are unique across the corpus."""

    def __init__(self) -> None:
        from app.core.capture import model

        self.m = model
        self.calls = 0

    def call_id(self) -> str:
        self.calls += 1
        return f"toolu_{self.calls:012d}"

    def assistant(self, rng: random.Random, clock: Clock, parts: list) -> Any:
        return self.m.Message("assistant", parts, timestamp=clock.tick(rng), model=MODEL,
                              usage={"input_tokens": rng.randint(2000, 60000), "output_tokens": rng.randint(20, 900)})

    def thinking(self, rng: random.Random, error: bool = False) -> Any:
        text = prose(rng, rng.randint(15, 140))
        if error:
            text = rng.choice(CORRECTIONS) + " " + text
        elif rng.random() < 0.3:
            text = "\n".join(f"{w}, {prose(rng, rng.randint(6, 18))}" for w in rng.sample(MARKERS, 3))
        return self.m.Part("thinking", text)

    def step(self, rng: random.Random, clock: Clock, tools: list[str], retry: tuple[str, dict] | None = None,
             fail: bool = False) -> tuple[list, tuple[str, dict] | None]:
        """One assistant message with 1-2 calls and the tool message with their results; (messages, failed call)."""
        parts = []
        if retry or rng.random() < 0.55:
            parts.append(self.thinking(rng, error=retry is not None))
        if rng.random() < 0.45:
            parts.append(self.m.Part("text", f"{rng.choice(OPENERS)} {prose(rng, rng.randint(3, 20))}"))
        n = 1 if retry or rng.random() < 0.85 else 2
        calls = []
        for k in range(n):
            if retry and k == 0:
                name, inp = retry[0], dict(retry[1])
                for key in ("command", "file_path", "old_string"):
                    if key in inp:
                        inp[key] = tool_input(rng, name).get(key, inp[key])
            else:
                name = rng.choice(tools)
                inp = tool_input(rng, name)
            calls.append((self.call_id(), name, inp))
        parts += [self.m.Part("tool_call", tool_name=name, tool_input=inp, call_id=cid) for cid, name, inp in calls]
        results, failed = [], None
        for k, (cid, name, inp) in enumerate(calls):
            error = fail or (not retry and k == 0 and rng.random() < 0.07)
            text = tool_error(rng, name, inp) if error else tool_output(rng, name, inp)
            results.append(self.m.Part("tool_result", text, call_id=cid, is_error=error))
            failed = (name, inp) if error else failed
        tool_msg = self.m.Message("tool", results, timestamp=clock.tick(rng, 0.1, 30))
        return [self.assistant(rng, clock, parts), tool_msg], failed

    def session(self, seed: int, sid: str, start: float, mutate: int = 0) -> Any:
        """A session drawn from `seed`; mutate > 0 changes that many words of its first request (a near-duplicate)."""
        rng = random.Random(seed)
        plan = draw_plan(rng)
        clock = Clock(start)
        sess = self.m.Session(agent="claude-code", session_id=sid, source_path=f"~/.claude/projects/-shop/{sid}.jsonl",
                              cwd="~/work/shop", project="shop", git_branch="main", agent_version="2.1.3", model=MODEL)
        msgs: list = []
        if plan.meta:
            msgs.append(self.m.Message("user", [self.m.Part("text", "<command-name>/clear</command-name>")],
                                       timestamp=clock.tick(rng), meta=True))
        per_turn = [plan.steps // plan.turns + (1 if t < plan.steps % plan.turns else 0) for t in range(plan.turns)]
        tools = ["Read"] * 6 + ["Bash"] * 5 + ["Edit"] * 3 + ["Grep"] * 3 + ["Glob", "Write", "TodoWrite"]
        spawn_at = rng.randrange(max(1, plan.steps)) if plan.subagent and plan.steps else -1
        step_no = 0
        for turn, steps in enumerate(per_turn):
            request = prose(rng, rng.randint(8, 70))
            if rng.random() < 0.15:
                request += "\n\n```\n" + code_lines(rng, rng.randint(3, 25)) + "\n```"
            if turn == 0 and mutate:  # its own generator: the rest of the session stays the same as the original's
                edit, words = random.Random(f"{seed}/{sid}"), request.split(" ")
                for _ in range(mutate):
                    words[edit.randrange(len(words))] = edit.choice(PROSE)
                request = " ".join(words)
            msgs.append(self.m.Message("user", [self.m.Part("text", request)], timestamp=clock.tick(rng, 30, 600)))
            if plan.summary and turn == 0:
                msgs.append(self.m.Message("user", [self.m.Part("text", prose(rng, 200))], timestamp=clock.tick(rng),
                                           compact_summary=True))
            failed = None
            for s in range(steps):
                last = turn == len(per_turn) - 1 and s == steps - 1
                if step_no == spawn_at:
                    msgs += self.spawn(rng, clock, sess, sid)
                else:
                    got, failed = self.step(rng, clock, tools, retry=failed,
                                            fail=last and plan.outcome == "errored")
                    msgs += got
                step_no += 1
            if plan.outcome in ("abandoned", "errored") and turn == len(per_turn) - 1:
                break
            answer = [self.m.Part("text", prose(rng, rng.randint(15, 150)))]
            if rng.random() < 0.3:
                answer[0].text += "\n\n" + "\n".join(f"- {prose(rng, rng.randint(4, 14))}" for _ in range(4))
            msgs.append(self.assistant(rng, clock, answer))
        if plan.rewind and len(msgs) > 3:
            sess.abandoned.append(self.step(rng, clock, tools)[0])
        sess.messages = msgs
        sess.started_at, sess.ended_at = msgs[0].timestamp, msgs[-1].timestamp
        return sess

    def spawn(self, rng: random.Random, clock: Clock, parent: Any, sid: str) -> list:
        """A Task call, the sub-agent's own session (read-only tools), and the call's result naming the agent."""
        cid, agent = self.call_id(), f"a{hashlib.sha1(f'{sid}{self.calls}'.encode()).hexdigest()[:16]}"
        prompt = "Investigate " + prose(rng, rng.randint(20, 60))
        sub = self.m.Session(agent="claude-code", session_id=agent, source_path=parent.source_path, cwd=parent.cwd,
                             project=parent.project, git_branch=parent.git_branch, agent_version=parent.agent_version,
                             model=MODEL, spawned_by=cid)
        inner = Clock(clock.t)
        msgs = [self.m.Message("user", [self.m.Part("text", prompt)], timestamp=inner.tick(rng))]
        for _ in range(rng.randint(2, 10)):
            msgs += self.step(rng, inner, ["Read", "Read", "Grep", "Glob", "Bash"])[0]
        report = prose(rng, rng.randint(60, 250))
        msgs.append(self.assistant(rng, inner, [self.m.Part("text", report)]))
        sub.messages, sub.started_at, sub.ended_at = msgs, msgs[0].timestamp, msgs[-1].timestamp
        parent.subagents.append(sub)
        call = self.m.Part("tool_call", tool_name="Task", call_id=cid,
                           tool_input={"description": prose(rng, 4), "prompt": prompt, "subagent_type": "Explore"})
        think = self.thinking(rng)
        clock.t = inner.t
        return [self.assistant(rng, clock, [think, call]),
                self.m.Message("tool", [self.m.Part("tool_result", f"{report}\nagentId: {agent}", call_id=cid)],
                               timestamp=clock.tick(rng))]


def populate(store, n: int, seed: int = 7) -> Counter:
    """n top-level sessions (~2 % near-duplicates of an earlier one) through session_rows, one transaction per 200."""
    from sqlalchemy import insert

    from app.core.capture.rows import session_rows
    from app.core.schema import AgentSession, MessageRow

    rng, gen, stats = random.Random(seed), Gen(), Counter()
    seeds: list[int] = []
    kept: dict[int, bool] = {}  # seed -> finished with tool calls (a near-duplicate shares its original's fate)
    start = time.mktime((2026, 6, 1, 9, 0, 0, 0, 0, 0))
    batch_s: list[dict] = []
    batch_m: list[dict] = []
    for i in range(n):
        start += rng.uniform(60, 4 * 3600)
        if seeds and rng.random() < 0.02:
            s, mutate = rng.choice(seeds), rng.randint(1, 4)
            stats["near-duplicates generated"] += 1
        else:
            s, mutate = rng.getrandbits(48), 0
            seeds.append(s)
        native = f"{i:08x}-0000-4000-8000-{s & 0xffffffffffff:012x}"
        sess = gen.session(s, native, start, mutate)
        sid = hashlib.sha1(f"claude-code\0~/.claude/projects/-shop/{native}.jsonl".encode()).hexdigest()[:20]
        rows, messages = session_rows(sid, sess)
        kept[s] = rows[0]["outcome"] == "finished" and rows[0]["tool_calls"] > 0
        stats["near-duplicates that pass the filters"] += mutate > 0 and kept[s]
        stats["session rows"] += len(rows)
        stats["message rows"] += len(messages)
        stats["sub-agent sessions"] += len(rows) - 1
        stats.update(f"outcome {r['outcome']}" for r in rows)
        batch_s += rows
        batch_m += messages
        if len(batch_s) >= 200 or i == n - 1:
            with store.engine.begin() as conn:
                conn.execute(insert(AgentSession), batch_s)
                conn.execute(insert(MessageRow), batch_m)
            batch_s, batch_m = [], []
    return stats


# --- timing -------------------------------------------------------------------------------------------------------
class Phases:
    """Exclusive wall time per phase: a phase running inside another pauses the outer one's clock."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.calls: Counter = Counter()
        self.stack: list[list] = []  # [name, started]

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            now = time.perf_counter()
            if self.stack:
                outer = self.stack[-1]
                self.total[outer[0]] += now - outer[1]
            self.stack.append([name, now])
            try:
                return fn(*args, **kwargs)
            finally:
                end = time.perf_counter()
                self.total[name] += end - self.stack.pop()[1]
                self.calls[name] += 1
                if self.stack:
                    self.stack[-1][1] = end
        return timed


def instrumented(phases: Phases, renderer, captured: dict):
    """Patches (undone on exit) that time the builder's phases without editing it; `captured['b']` gets the Build."""
    from app.core.datasets import builder, checks, dedup, filters, manifest, windows

    def keep(write: Callable) -> Callable:
        def inner(out, config, mode, r, b, *rest):
            captured["b"] = b
            return write(out, config, mode, r, b, *rest)
        return inner

    stack = contextlib.ExitStack()
    for target, attr, name in ((builder, "load_conversations", "load (SQL + ORM)"), (filters, "apply", "filters"),
                               (builder, "conversation", "convert (rows -> messages)"),
                               (dedup, "near_duplicates", "dedup (MinHash)"), (builder, "_split_sessions", "splits"),
                               (windows, "windows", "windows (token counts)"), (checks, "standard", "checks"),
                               (manifest, "example_id", "example ids"), (builder, "_overlap", "overlap check"),
                               (builder, "_write", "write (JSONL + manifest)")):
        fn = getattr(target, attr)
        stack.enter_context(mock.patch.object(target, attr, phases.wrap(name, keep(fn) if attr == "_write" else fn)))
    for attr, name in (("render", "render (template + tokens + mask)"), ("deep", "deep (round-trip checks)")):
        stack.enter_context(mock.patch.object(renderer, attr, phases.wrap(name, getattr(renderer, attr))))
    return stack


def ours(store, folder: str, renderer, out: Path, max_length: int) -> tuple[float, float, Any, Phases, Any]:
    from app.core.datasets.builder import build
    from app.core.datasets.config import BuildConfig

    phases, captured = Phases(), {}
    config = BuildConfig(base_model=folder, max_length=max_length, name="bench")
    with instrumented(phases, renderer, captured):
        started, cpu = time.perf_counter(), time.process_time()
        manifest = build(store, config, renderer, out, lambda *_: None)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return elapsed, cpu, manifest, phases, captured["b"]


def profiled(store, folder: str, renderer, out: Path, max_length: int, top: int = 25) -> str:
    from app.core.datasets.builder import build
    from app.core.datasets.config import BuildConfig

    prof = cProfile.Profile()
    prof.enable()
    build(store, BuildConfig(base_model=folder, max_length=max_length, name="bench-profile"), renderer, out)
    prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top + 15)
    return text.getvalue()


def plain(store, tokenizer, out: Path, max_length: int) -> tuple[float, float, dict]:
    """The obvious loop: every stored session -> conversation -> apply_chat_template(tokenize=True) -> JSONL."""
    from sqlalchemy import select

    from app.core.datasets.convert import conversation
    from app.core.schema import AgentSession, MessageRow

    lengths, over, dropped_calls = [], 0, 0
    started, cpu = time.perf_counter(), time.process_time()
    with store.session() as s, out.open("w", encoding="utf-8") as fh:
        for sess in s.scalars(select(AgentSession).order_by(AgentSession.started_at, AgentSession.id)).all():
            rows = s.scalars(select(MessageRow).where(MessageRow.session_id == sess.id, MessageRow.branch == 0)
                             .order_by(MessageRow.seq)).all()
            conv = conversation(sess, rows)
            ids = tokenizer.apply_chat_template(conv.messages, tokenize=True)["input_ids"]
            fh.write(json.dumps({"session_id": sess.id, "messages": conv.messages, "input_ids": ids}) + "\n")
            lengths.append(len(ids))
            over += len(ids) > max_length
            dropped_calls += sum(len(m.get("tool_calls") or []) for m in conv.messages)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return elapsed, cpu, {"examples": len(lengths), "tokens": sum(lengths), "over": over, "calls": dropped_calls}


# --- figures ------------------------------------------------------------------------------------------------------
def pct(values: list[int], p: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def padded(lengths: list[int], batch: int) -> tuple[int, int]:
    """(padding tokens, slots) batching in the given order, each batch padded to its longest."""
    pad = slots = 0
    for i in range(0, len(lengths), batch):
        chunk = lengths[i:i + batch]
        slots += len(chunk) * max(chunk)
        pad += len(chunk) * max(chunk) - sum(chunk)
    return pad, slots


def ffd(lengths: list[int], capacity: int) -> list[int]:
    """First-fit decreasing into rows of `capacity` tokens (a max segment tree finds the first row with room)."""
    items = sorted((min(n, capacity) for n in lengths), reverse=True)
    size = 1
    while size < max(1, len(items)):
        size *= 2
    room = [capacity] * (2 * size)
    fills = [0] * size
    used = 0
    for n in items:
        i = 1
        while i < size:
            i = 2 * i if room[2 * i] >= n else 2 * i + 1
        fills[i - size] += n
        used = max(used, i - size + 1)
        room[i] -= n
        i //= 2
        while i:
            room[i] = max(room[2 * i], room[2 * i + 1])
            i //= 2
    return fills[:used]


def padding_table(lengths: list[int], capacities: list[int], batches: tuple[int, ...]) -> None:
    if not lengths:
        print("\npadding: no train examples")
        return
    shuffled = lengths[:]
    random.Random(0).shuffle(shuffled)
    print(f"\npadding, {len(lengths)} train examples (pad = tokens added to fill each batch to its longest row)")
    print(f"{'max_len':>7} {'batch':>5} | {'unpacked pad':>12} {'eff':>6} {'eff shuffled':>12} | {'packed rows':>11} "
          f"{'tok/row':>7} {'pad':>9} {'eff':>6} | {'padding saved':>13}")
    for cap in capacities:
        clipped = [min(n, cap) for n in lengths]
        real = sum(clipped)
        rows = ffd(clipped, cap)
        for batch in batches:
            pad_u, slots_u = padded(clipped, batch)
            pad_s, slots_s = padded([min(n, cap) for n in shuffled], batch)
            pad_p, slots_p = padded(rows, batch)
            saved = 1 - pad_p / pad_u if pad_u else 0.0
            print(f"{cap:>7} {batch:>5} | {pad_u:>12,} {real / slots_u:>6.1%} {real / slots_s:>12.1%} | "
                  f"{len(rows):>11,} {real / len(rows):>7.0f} {pad_p:>9,} {real / slots_p:>6.1%} | {saved:>13.1%}")
        over = sum(1 for n in lengths if n > cap)
        if over:
            print(f"        ({over} examples longer than {cap} clipped to it)")
    print("eff = real tokens / (real + padding); packed rows padded to the longest row of their batch (a padding-free "
          "collator with position ids has none at all)")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def tokenizer_folder(tmp: Path, given: str | None) -> tuple[str, str]:
    if given:
        return given, Path(given).name
    if (SMOLLM2 / "tokenizer.json").is_file():
        return str(SMOLLM2), "SmolLM2-135M-Instruct"
    print(f"NOTE: {SMOLLM2} is missing: falling back to a small BPE tokenizer built from tests/tiny_model.py "
          "(figures are NOT comparable with SmolLM2's)")
    from tests.tiny_model import build

    return str(build(tmp / "tiny")), "tiny BPE (fallback)"


def main() -> None:
    parser = argparse.ArgumentParser(description="Dataset build throughput vs a plain apply_chat_template loop; "
                                     "tokens per example; padding saved by packing.")
    parser.add_argument("--sessions", type=int, default=10000)
    parser.add_argument("--quick", action="store_true", help="500 sessions (a smoke run)")
    parser.add_argument("--max-length", type=int, default=2048, help="the build's max_length")
    parser.add_argument("--tokenizer", help="a model folder (default: the materialised SmolLM2-135M-Instruct)")
    parser.add_argument("--profile", action="store_true", help="also build once more under cProfile, print hot spots")
    parser.add_argument("--keep", type=Path, help="build into this folder and keep it (default: a temp dir)")
    args = parser.parse_args()
    n = 500 if args.quick else args.sessions

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["NIGHTSCHOOL_HOME"] = str(tmp / "home")
        from transformers import AutoTokenizer

        from app.core.store import Store
        from engine.render import Renderer

        folder, label = tokenizer_folder(tmp, args.tokenizer)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        renderer = Renderer(tokenizer, label)
        store = Store(tmp / "bench.db")
        t = time.perf_counter()
        made = populate(store, n)
        generated = time.perf_counter() - t
        db_mb = (tmp / "bench.db").stat().st_size / 1024**2
        print(f"corpus: {n} sessions + {made['sub-agent sessions']} sub-agent sessions = {made['session rows']} "
              f"session rows, {made['message rows']} message rows, {db_mb:.0f} MB SQLite (generated and stored in "
              f"{generated:.0f} s); {made['near-duplicates generated']} near-duplicates "
              f"({made['near-duplicates that pass the filters']} of sessions the filters keep); outcomes: "
              + ", ".join(f"{k.split()[1]} {v}" for k, v in sorted(made.items()) if k.startswith("outcome")))
        print(f"tokenizer: {label} ({renderer.convention}, training template "
              f"{'yes' if renderer.marked else 'no'}); max_length {args.max_length}; {os.cpu_count()} CPUs")

        out = args.keep or tmp / "built"
        rss_before = peak_rss_mb()
        mine, mine_cpu, man, phases, b = ours(store, folder, renderer, out, args.max_length)
        rss_after = peak_rss_mb()
        examples = man.examples
        sessions = b.counts["sessions"]
        print(f"\nnightschool build: {mine:.1f} s (CPU {mine_cpu:.1f} s) — {sessions / mine:.1f} sessions/s, "
              f"{examples / mine:.1f} examples/s "
              f"({examples} examples from {len(b.conversations)} sessions kept of {sessions})")
        print(f"  peak RSS {rss_after:,.0f} MB (before the build {rss_before:,.0f} MB): every example is held in "
              "memory until the write, with its text, ids, mask, offsets and preview segments")
        print("  removed: " + ", ".join(f"{k} {v}" for k, v in b.filters.items() if v))
        excluded = {k: v for k, v in b.counts.items() if k.startswith("excluded")}
        print("  excluded by checks: " + (", ".join(f"{k.split(': ')[-1]} {v}" for k, v in excluded.items())
                                          or "none"))
        accounted = sum(phases.total.values())
        print("  where the time goes (exclusive wall time):")
        for name, secs in sorted(phases.total.items(), key=lambda kv: -kv[1]):
            print(f"    {name:<34} {secs:8.2f} s {secs / mine:6.1%}  ({phases.calls[name]} calls)")
        print(f"    {'other (splits, Build, progress)':<34} {mine - accounted:8.2f} s {(mine - accounted) / mine:6.1%}")

        base, base_cpu, info = plain(store, tokenizer, tmp / "plain.jsonl", args.max_length)
        print(f"\nplain loop (convert + apply_chat_template(tokenize=True) + JSONL): {base:.1f} s "
              f"(CPU {base_cpu:.1f} s) — "
              f"{info['examples'] / base:.1f} sessions/s, {info['tokens']:,} tokens")
        print(f"  {info['over']} of {info['examples']} examples longer than {args.max_length} tokens (a trainer "
              f"truncates them); {info['calls']:,} tool calls in the messages"
              + ("" if renderer.native else ", none of them rendered (the template has no tool support: "
                                              "`tool_calls` are dropped silently)"))
        print(f"ratio ours / plain: wall time {mine / base:.2f}, CPU time {mine_cpu / base_cpu:.2f}")

        lengths = [len(e.rendered["input_ids"]) for e in b.examples]
        trained = sum(sum(e.rendered["assistant_masks"]) for e in b.examples)
        print(f"\ntokens per example ({len(lengths)} examples): min {min(lengths)}, p10 {pct(lengths, 10)}, "
              f"p50 {pct(lengths, 50)}, p90 {pct(lengths, 90)}, p99 {pct(lengths, 99)}, max {max(lengths)}, "
              f"mean {statistics.fmean(lengths):.0f}; trained share {trained / sum(lengths):.1%} "
              f"({trained:,} of {sum(lengths):,} tokens)")
        windows = Counter(e.session_id for e in b.examples)
        print(f"  windows per session: mean {statistics.fmean(windows.values()):.2f}, max {max(windows.values())}, "
              f"{sum(1 for v in windows.values() if v > 1)} sessions cut into several windows")

        train = [len(e.rendered["input_ids"]) for e in sorted(b.examples, key=lambda e: (e.session_id, e.window, e.id))
                 if e.split == "train"]
        padding_table(train, sorted({2048, args.max_length}), (4, 8))

        if args.profile:
            print("\ncProfile of a second build (same store):")
            print(profiled(store, folder, renderer, tmp / "built-profile", args.max_length))
        store.close()


if __name__ == "__main__":
    main()
