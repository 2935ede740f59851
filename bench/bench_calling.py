"""What a built dataset teaches about calling: over the train split's assistant messages (every one is trained), the
share of tool calls vs text answers against the transcripts', how windows end, final text answers kept, decisions
trained right after the header without the tool result they followed, long calls, cut markers and invalid calls.

    NIGHTSCHOOL_HOME=DIR .venv/bin/nightschool capture import ../shared/fixtures/real-world{,-2}
    NIGHTSCHOOL_HOME=DIR .venv/bin/nightschool dataset build --mode full --max-length 1024 [--windows decisions]
    NIGHTSCHOOL_HOME=DIR .venv/bin/python -m bench.bench_calling NAME [NAME …]
"""
from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

THINK = re.compile(r"<think>.*?</think>\s*", re.S)
BUDGET = 160  # the judge's default max_new_tokens (judge/report.EvalSettings): a longer action cannot be finished
LONG_ARGS = 1000  # characters of a call's arguments as JSON


def kind(m: dict) -> str:
    """call, text (a text answer) or both (text and calls in one message); thinking aside."""
    text = THINK.sub("", m.get("content") or "").strip()
    calls = m.get("tool_calls") or []
    return "both" if calls and text else "call" if calls else "text"


def key(m: dict) -> str:
    return json.dumps(m, sort_keys=True)


def measure(store, folder: Path, tokens) -> dict:
    """The figures of one built dataset's train split (`tokens(text)`: a tokenizer's count)."""
    from app.core.datasets import manifest
    from app.core.datasets.builder import load_conversations
    from app.core.datasets.config import BuildConfig
    from app.core.datasets.examples import Build
    from app.core.datasets.windows import header_length
    from app.core.toolcalls import schemas
    from app.core.toolcalls.convention import as_text, tools_in_system

    man = manifest.read(folder)
    train = {u.id for u in man.sessions if u.split == "train"}
    recs = [r for r in manifest.iter_examples(folder, "train") if r["session_id"] in train]
    config = BuildConfig(**{k: v for k, v in man.config.items() if k in BuildConfig.model_fields})
    convs = {c.session_id: c for c in load_conversations(store, config, Build(), lambda *_: None)
             if c.session_id in train}
    c: Counter = Counter()
    teacher = {sid: {key(m): (i, m) for i, m in enumerate(conv.messages) if m["role"] == "assistant"}
               for sid, conv in convs.items()}
    for conv in convs.values():
        for i, m in enumerate(conv.messages):
            if m["role"] == "assistant" and i >= header_length(conv.messages):
                c["decisions"] += 1
                c[f"decisions: {kind(m)}"] += 1
                if kind(m) == "text" and (i + 1 == len(conv.messages) or conv.messages[i + 1]["role"] == "user"):
                    c["final text answers"] += 1
    seen, last = Counter(), Counter()
    calls = [call["function"] for r in recs for m in r["messages"] for call in m.get("tool_calls") or []]
    tool_schemas = schemas.infer(calls)
    for r in recs:
        msgs, head = r["messages"], header_length(r["messages"])
        tools = set(tools_in_system(msgs[0]["content"])) if msgs and msgs[0]["role"] == "system" else set()
        assistant = [j for j in range(head, len(msgs)) if msgs[j]["role"] == "assistant"]
        c["windows"] += 1
        c[f"windows ending on: {kind(msgs[assistant[-1]])}"] += 1
        last[(r["session_id"], key(msgs[assistant[-1]]))] += 1
        for j in assistant:
            m = msgs[j]
            c["trained"] += 1
            c[f"trained: {kind(m)}"] += 1
            seen[(r["session_id"], key(m))] += 1
            at = teacher[r["session_id"]].get(key(m))
            if at is None:
                c["trained: not the transcript's"] += 1
            elif at[0] > 0 and convs[r["session_id"]].messages[at[0] - 1]["role"] == "tool" and \
                    msgs[j - 1]["role"] != "tool":
                c[f"trained without the result it followed: {'text' if kind(m) == 'text' else 'call'}"] += 1
            text = as_text(m)["content"]
            if m.get("tool_calls"):
                c[f"call messages over {BUDGET} tokens"] += tokens(text) > BUDGET
                c[f"call messages over {BUDGET} tokens without thinking"] += tokens(as_text(
                    {**m, "content": THINK.sub("", m.get("content") or "")})["content"]) > BUDGET
                attempted, valid, _ = schemas.validity(text, tools, tool_schemas)
                c["invalid calls"] += attempted - valid
            for call in m.get("tool_calls") or []:
                args = json.dumps(call["function"]["arguments"], ensure_ascii=False)
                c["calls"] += 1
                c[f"arguments over {LONG_ARGS} characters"] += len(args) > LONG_ARGS
                c["cut markers in arguments"] += "…[cut " in args
    for sid, by in teacher.items():
        for k, (i, m) in by.items():
            if i < header_length(convs[sid].messages):
                continue
            taught = seen[(sid, k)]
            c[f"decisions trained: {kind(m)}"] += bool(taught)
            c[f"trainings of those: {kind(m)}"] += taught
            c[f"decisions ending a window: {kind(m)}"] += bool(last[(sid, k)])
            nxt = convs[sid].messages[i + 1]["role"] if i + 1 < len(convs[sid].messages) else None
            if kind(m) == "text" and nxt in (None, "user"):
                c["final text answers trained"] += bool(taught)
                c["final text answers ending a window"] += bool(last[(sid, k)])
    c["sessions"] = len(convs)
    return dict(c)


def report(name: str, c: dict) -> None:
    def share(n: int, d: int) -> str:
        return f"{n} of {d} ({n / max(1, d):.1%})"

    kinds = ("call", "both", "text")
    print(f"\n{name}: {c['sessions']} train sessions, {c['windows']} windows")
    print("  teacher decisions: " + ", ".join(f"{k} {c.get(f'decisions: {k}', 0)}" for k in kinds)
          + f"; text {share(c.get('decisions: text', 0), c['decisions'])}")
    print("  decisions in no example: " + ", ".join(
        f"{k} {c.get(f'decisions: {k}', 0) - c.get(f'decisions trained: {k}', 0)}" for k in kinds))
    print("  trained assistant messages: " + ", ".join(f"{k} {c.get(f'trained: {k}', 0)}" for k in kinds)
          + f"; text {share(c.get('trained: text', 0), c['trained'])}")
    print("  trainings per decision: " + ", ".join(
        f"{k} {c.get(f'trainings of those: {k}', 0) / max(1, c.get(f'decisions trained: {k}', 0)):.2f}" for k in kinds))
    print(f"  windows ending on a text answer: {share(c.get('windows ending on: text', 0), c['windows'])}")
    print(f"  final text answers: {c.get('final text answers', 0)}; trained "
          f"{c.get('final text answers trained', 0)}; ending a window {c.get('final text answers ending a window', 0)}")
    orphans = c.get("trained without the result it followed: call", 0) + \
        c.get("trained without the result it followed: text", 0)
    print(f"  trained right after the header without the result they followed: {share(orphans, c['trained'])} "
          f"(calls {c.get('trained without the result it followed: call', 0)}, "
          f"text {c.get('trained without the result it followed: text', 0)})")
    calls = c.get("trained: call", 0) + c.get("trained: both", 0)
    print(f"  call messages over {BUDGET} tokens: {share(c.get(f'call messages over {BUDGET} tokens', 0), calls)}"
          f" ({c.get(f'call messages over {BUDGET} tokens without thinking', 0)} without their thinking)")
    print(f"  calls {c.get('calls', 0)}: arguments over {LONG_ARGS} characters "
          f"{c.get(f'arguments over {LONG_ARGS} characters', 0)}, cut markers in arguments "
          f"{c.get('cut markers in arguments', 0)}, invalid {c.get('invalid calls', 0)}, not the transcript's "
          f"messages {c.get('trained: not the transcript' + chr(39) + 's', 0)}")


def main() -> None:
    parser = argparse.ArgumentParser(description="What built datasets teach about calling (their train splits).")
    parser.add_argument("names", nargs="+", help="datasets of the data dir (NIGHTSCHOOL_HOME), or their folders")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from app.core.base import paths
    from app.core.base.store import Store
    from engine import render

    tok = render.load("default", paths.models_dir()).tok
    store = Store(paths.data_dir() / "nightschool.db")
    try:
        for name in args.names:
            folder = Path(name) if Path(name).is_dir() else paths.data_dir() / "datasets" / name
            found = measure(store, folder, lambda text: len(tok(text)["input_ids"]))
            print(json.dumps({name: found}, indent=1)) if args.json else report(name, found)
    finally:
        store.close()


if __name__ == "__main__":
    main()
