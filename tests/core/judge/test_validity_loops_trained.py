"""A validity drop reproduced with a student really trained, and the served decoding holding it (issue 24).

On real transcripts the student that learned to call tools wrote repetition loops inside arguments (`-D <path>`
repeated) until the token limit: an unclosed <tool_call>, invalid; validity fell from the base's 0.875 to 0.696. Here,
on constructed sessions, the same happens to a real model trained through the product's path, and the fix holds it:

- the base: the tiny llama model (tests/tiny_model.build, its tokenizer trained on the sessions' text) pre-trained
  here for a few seconds (full weights, 120 steps) to answer "Build the X package." with a valid call carrying one
  `-D lib` flag: the stand-in for an instruct base that already calls tools validly. A base that never calls a tool
  would make the comparison empty: validity is valid / attempted blocks, and a model that attempts none where the
  teacher called tools scores 0 (report.metrics_from), so nothing could fall below it;
- the cycle: the engine's SFT (JobManager, LoRA, 150 steps) on 48 captured sessions whose command repeats the flag
  two to ten times; at every count up to 8 about 65 % of the commands that reach it go on. A model that cannot tell
  these counts apart learns that rate at every flag: "one more" over closing by about log(0.65/0.35) (0.45 nats
  measured, logits ~8.6 against ~8.1). The held-out loss falls to a third of the base's;
- judged with greedy decoding as before the fix (repeat_penalty 1.0) the student writes flags until max_new_tokens on
  every held-out call (15 of them): unclosed, invalid, validity 0 against the base's 1;
- judged as served (repeat_penalty 1.1 over the generated tokens, decoding.py): the flag's tokens, once generated,
  lose a tenth of their logit (~0.8 nats), more than the ~0.45 they win by; the student closes every call (after
  two flags) and its validity is the base's.

What this shows and what it does not: the penalty holds a loop whose margin is below about a tenth of the repeated
token's logit. A student that prefers repeating by more loops under 1.1 too: trained on commands where a flag is
followed by another ~71 % of the time, the same student's margin was 0.85-1.3 nats at most counts and the penalty
closed its calls only after five flags, at the one count where the margin happened to be 0.5 (seen while building
this test).

The evaluations are the product's (judge.evaluate → engine/workers/evaluate, transformers). The fix's other half, an
answer ends at its first </tool_call>, is always on in that evaluator (not a setting); it changes nothing here, where
the looping answers never close: the old decoding is reproduced by the penalty's setting alone."""
from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.core.judge import decoding
from app.core.judge.evaluate import choose_set, evaluate, generations
from app.core.judge.records import Target, of_job
from app.core.judge.report import EvalSettings
from tests.conftest import fast_hyper, write_jsonl

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # a base pre-trained, a cycle trained, four evaluations: 45-65 s on 2 shared cores
NAMES = ["api", "cli", "core", "db", "net", "auth", "log", "util", "web", "cache", "queue", "store"]
FLAG = " -D lib"
# flags per training command (48 sessions): at every count up to 8, about 65 % of the commands that reach it go on
COUNTS = [2] * 17 + [3] * 11 + [4] * 7 + [5] * 5 + [6] * 3 + [7] * 2 + [8, 9, 10]
HELD_OUT = [2, 3, 2, 4, 2, 6, 3, 2]
OLD, SERVED = 1.0, decoding.REPEAT_PENALTY  # repeat penalties: greedy as judged before the fix; as served
MAX_NEW = 64  # a call with 8 flags is 50 tokens; a looping one has written 15 flags when it reaches this


def command(name: str, flags: int) -> str:
    return f"cmake{FLAG * flags} build/{name}"


def session(name: str, flags: int, sid: str) -> dict:
    """A captured session in the dataset format: the user asks for a build, the agent runs it, then says so."""
    call = {"type": "function", "function": {"name": "Bash", "arguments": {"command": command(name, flags)}}}
    return {"session_id": sid, "messages": [
        {"role": "user", "content": f"Build the {name} package."},
        {"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": f"Built {name}."}]}


def corpus() -> list[str]:
    """The sessions' text, for the tiny model's tokenizer (the flag is three tokens: ` -`, `D`, ` lib`)."""
    lines = []
    for name in NAMES:
        lines += ['<tool_call>{"name": "Bash", "arguments": {"command": "' + command(name, n) + '"}}</tool_call>'
                  for n in (0, 1, 2, 3, 5)]
        lines += [f"Build the {name} package.", f"Built {name}.", "ok user assistant tool system"]
    return lines * 5


def calling_base(folder: Path, steps: int = 120) -> Path:
    """The tiny model pre-trained (full weights, assistant tokens, one thread: seconds) on sessions that call the
    build with one flag: a base that already calls tools validly."""
    from transformers import AutoModelForCausalLM

    from engine import render
    from tests.tiny_model import build

    build(folder, corpus=corpus(), vocab_size=500, hidden=64)
    renderer = render.load(str(folder), folder.parent)
    rows = [renderer.render(session(name, 1, "")["messages"]) for name in NAMES]
    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.tensor([r["input_ids"] + [renderer.tok.pad_token_id] * (width - len(r["input_ids"])) for r in rows])
    labels = torch.tensor([[t if m else -100 for t, m in zip(r["input_ids"], r["assistant_masks"])]
                           + [-100] * (width - len(r["input_ids"])) for r in rows])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two threads on a shared 2-core machine spin: ~10x slower
    try:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(folder)
        opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
        model.train()
        for _ in range(steps):
            pick = torch.randint(0, len(rows), (8,))
            model(input_ids=ids[pick], labels=labels[pick]).loss.backward()
            opt.step()
            opt.zero_grad()
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(folder)
    return folder


def calls(row) -> list[str]:
    """The answers written where the teacher called a tool."""
    return [g["student"] for g in generations(row) if g["teacher"].startswith("<tool_call>")]


def test_a_trained_student_loops_in_its_arguments_and_the_served_decoding_closes_them(store, manager, tmp_path,
                                                                                      monkeypatch, capsys):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the engine and the evaluation workers: one thread each (as above)
    folder = calling_base(tmp_path / "base")
    counts = COUNTS.copy()
    random.Random(0).shuffle(counts)  # no name has a count of its own
    train = [session(NAMES[i % len(NAMES)], n, f"t{i}") for i, n in enumerate(counts)]
    held = [session(name, n, f"h{i}") for i, (name, n) in enumerate(zip(NAMES, HELD_OUT))]
    base = Target(str(folder))
    evset = choose_set(store, base, file=write_jsonl(tmp_path / "heldout.jsonl", held))
    got = {}

    def judged(name: str, target: Target) -> None:
        for penalty in (OLD, SERVED):
            settings = EvalSettings(max_contexts=16, max_new_tokens=MAX_NEW, samples=0, repeat_penalty=penalty)
            got[name, penalty] = evaluate(store, target, evset, settings)

    with ThreadPoolExecutor(1) as pool:  # the base is judged while the engine trains (the test's time: ~20 s less)
        base_judged = pool.submit(judged, "base", base)
        job = manager.wait(manager.submit(write_jsonl(tmp_path / "train.jsonl", train), model=str(folder),
                                          hyper=fast_hyper(max_steps=150)).id, timeout=300)
        assert job.state == "completed", job.error
        judged("student", of_job(store, job.id))
        base_judged.result()
    metric = {key: report.metrics for key, (_, report) in got.items()}
    with capsys.disabled():  # the figures, for `pytest -s`
        for (name, penalty), m in sorted(metric.items()):
            flags = [text.count(FLAG) for text in calls(got[name, penalty][0])]
            print(f"{name} repeat_penalty {penalty}: loss {m['loss']:.3f}, validity {m['validity']}, "
                  f"agreement {m['agreement']}, flags per call {flags}")

    # the cycle learned: the held-out loss (teacher-forced: the same under either decoding) fell
    assert metric["student", OLD]["loss"] < 0.5 * metric["base", OLD]["loss"]
    # the base calls validly with one flag, decoded either way
    for penalty in (OLD, SERVED):
        assert metric["base", penalty]["validity"] == 1.0
        assert all(text.count(FLAG) == 1 and text.endswith("</tool_call>") for text in calls(got["base", penalty][0]))
    # the drop reproduced: greedy without the penalty, every call repeats the flag until the token limit, unclosed
    looped = calls(got["student", OLD][0])
    assert looped and all(text.count(FLAG) > max(COUNTS) and "</tool_call>" not in text for text in looped), looped
    assert got["student", OLD][1].outcomes.get("invalid_call") == len(looped)
    assert metric["student", OLD]["validity"] == 0.0 < metric["base", OLD]["validity"]
    # the fix holds: decoded as served, every call closes after a few flags and validity is not below the base's
    fixed = calls(got["student", SERVED][0])
    assert all(2 <= text.count(FLAG) <= max(COUNTS) and text.endswith("</tool_call>") for text in fixed), fixed
    assert metric["student", SERVED]["validity"] >= metric["base", SERVED]["validity"]
