"""Generated agent sessions for the dataset benchmark, in the Claude Code shape (thinking, text and tool calls in one
assistant message, tool results in a `tool` message; long-tailed lengths, failed calls and retries, sub-agents,
near-duplicates, abandoned / errored / tool-less sessions), stored through `capture.rows.session_rows`."""
from __future__ import annotations

import hashlib
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

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
        from app.core.capture import session

        self.m = session
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


def populate(store, n: int, seed: int = 7, start_index: int = 0, written: Callable | None = None) -> Counter:
    """n top-level sessions (~2 % near-duplicates of an earlier one) through session_rows, one transaction per 200.

    `start_index` grows a store made by an earlier call (new ids, later times); `written(rows, messages)` sees each
    batch as it is stored."""
    from sqlalchemy import insert

    from app.core.base.schema import AgentSession, MessageRow
    from app.core.capture.rows import session_rows

    rng, gen, stats = random.Random(seed + start_index), Gen(), Counter()
    seeds: list[int] = []
    kept: dict[int, bool] = {}  # seed -> finished with tool calls (a near-duplicate shares its original's fate)
    start = time.mktime((2026, 6, 1, 9, 0, 0, 0, 0, 0)) + start_index * 2.1 * 3600
    batch_s: list[dict] = []
    batch_m: list[dict] = []
    for i in range(start_index, start_index + n):
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
        if len(batch_s) >= 200 or i == start_index + n - 1:
            with store.engine.begin() as conn:
                conn.execute(insert(AgentSession), batch_s)
                conn.execute(insert(MessageRow), batch_m)
            if written:
                written(batch_s, batch_m)
            batch_s, batch_m = [], []
    return stats
