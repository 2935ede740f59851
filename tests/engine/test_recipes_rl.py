"""GRPO / RLOO recipes: prompts cut from chat records with the reward's context, long prompts fitted, the plan and the
TRL config; real jobs through the engine subprocess whose reward rises, and LoRA jobs (one continuing from an
adapter) that save a clean adapter."""
from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import pytest

from app.core.base.fingerprint import sha256_file
from app.core.train.events import read_events
from app.core.train.spec import Hyper, JobSpec
from engine.errors import EngineError
from tests.conftest import write_jsonl
from tests.engine.helpers import of_type, states

SYSTEM = {"role": "system", "content": "You are a coding agent. Tools: Read, Edit, Bash. Call a tool by writing "
                                       '<tool_call>{"name": "...", "arguments": {...}}</tool_call>.'}
REPO = Path(__file__).resolve().parents[2]
# the reward test (full fine-tuning of the tiny model). RLOO's loss sums log-probs over a completion, so its gradients
# are ~length x GRPO's (spikes to 60 at 3e-2 with 8 prompts a generation, where GRPO's stay below 1): a lower rate and
# all 16 prompts in every generation keep it steady.
SETTINGS = {"grpo": dict(learning_rate=5e-2, batch_size=32), "rloo": dict(learning_rate=2e-2, batch_size=64)}
REASONING_ONLY = {"constraint": 0.0, "reasoning": 1.0, "efficiency": 0.0, "self_correction": 0.0, "exploration": 0.0}
COMPONENTS = {"constraint", "reasoning", "efficiency", "self_correction",
              "exploration"}


def _call(cid: str, name: str, **arguments) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def agent_session(i: int = 0) -> dict:
    """An agent session converted to chat: read, a failed test run, an edit, a text answer."""
    return {"messages": [
        SYSTEM,
        {"role": "user", "content": f"Fix the failing test number {i} in main.py."},
        {"role": "assistant", "content": "First I read the file.", "tool_calls": [_call("a", "Read",
                                                                                        file_path="main.py")]},
        {"role": "tool", "tool_call_id": "a", "content": "def add(a, b): return a - b"},
        {"role": "assistant", "content": "", "tool_calls": [_call("b", "Bash", command="pytest")]},
        {"role": "tool", "tool_call_id": "b", "content": "Error: AssertionError in test_add (main.py)"},
        {"role": "assistant", "content": "Actually the sign is wrong.",
         "tool_calls": [_call("c", "Edit", file_path="main.py", old="a - b", new="a + b")]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
        {"role": "assistant", "content": f"Fixed test {i}: add now returns a + b."},
    ]}


def question_records(n: int = 16) -> list[dict]:
    """Distinct questions answered in text (reasoning depth is what the reward test scores)."""
    topics = ["the parser", "main.py", "the tests", "the cache", "the build", "the config", "the server", "the docs"]
    return [{"messages": [{"role": "user", "content": f"What should I check first in {topics[i % 8]}, case {i}?"},
                          {"role": "assistant", "content": "First I read the file. Then I run the tests."}]}
            for i in range(n)]


class Server:
    """A stand-in for the engine server: records what a recipe emits."""

    def __init__(self) -> None:
        self.events: list = []

    def emit(self, body) -> None:
        self.events.append(body)


def make_recipe(kind: str, tmp_path: Path, records: list[dict], model: Path, **hyper):
    from engine.train.recipes import recipe_for

    data = write_jsonl(tmp_path / "dataset.jsonl", records)
    spec = JobSpec(job_id="j1", kind=kind, dataset_path=str(data), dataset_sha256=sha256_file(data), model=str(model),
                   models_dir=str(tmp_path / "models"), run_dir=str(tmp_path), socket_path=str(tmp_path / "s.sock"),
                   token="t", hyper=Hyper(**hyper))
    return recipe_for(kind)(spec, "0" * 64, Server())


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """Engines started by these tests use one intra-op thread: on a small shared CPU two threads spin against each
    other and other work (the RL jobs run ~3x slower)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


# --- data ----------------------------------------------------------------------------------------------------------

def test_every_context_before_an_assistant_turn_is_a_prompt_with_its_reward_context(tmp_path, tiny_model):
    records = [agent_session(), {"messages": [{"role": "user", "content": "hi"}]}]
    rows = make_recipe("grpo", tmp_path, records, tiny_model).rows(records)
    assert len(rows) == 4  # one per assistant message of the session; the record without one gives nothing
    assert all(set(r) == {"prompt", "reward_context"} and isinstance(r["reward_context"], str) for r in rows)
    by_length = sorted(rows, key=lambda r: len(r["prompt"]))
    assert [m["role"] for m in by_length[0]["prompt"]] == ["system", "user"]
    assert all(set(m) == {"role", "content"} and isinstance(m["content"], str) for r in rows for m in r["prompt"])
    edit_step = by_length[2]  # the context that ends with the failed test run
    assert edit_step["prompt"][-1]["content"].startswith("Error: AssertionError")
    assert '<tool_call>{"name": "Bash", "arguments": {"command": "pytest"}}</tool_call>' in \
        edit_step["prompt"][-2]["content"]  # the context's tool calls in the Hermes convention
    ctx = json.loads(edit_step["reward_context"])
    assert ctx["tools"] == ["Read", "Edit", "Bash"] and ctx["after_error"] is True
    assert ctx["failed_call"] == {"name": "Bash", "arguments": {"command": "pytest"}}
    assert [c["name"] for c in ctx["teacher_calls"]] == ["Edit"] and ctx["seen_paths"] == ["main.py"]
    last = json.loads(by_length[3]["reward_context"])
    assert last["teacher_calls"] == [] and last["teacher_text"].startswith("Fixed test 0")


def test_prompts_are_capped_and_duplicates_cut_once(tmp_path, tiny_model, monkeypatch):
    from engine.train.recipes import rl

    monkeypatch.setattr(rl, "MAX_PROMPTS", 5)
    recipe = make_recipe("grpo", tmp_path, [agent_session(i) for i in range(3)] + [agent_session(0)], tiny_model)
    assert len(recipe.rows([agent_session(0), agent_session(0)])) == 4
    rows = recipe.rows([agent_session(i) for i in range(3)])
    assert len(rows) == 5 and rows == recipe.rows([agent_session(i) for i in range(3)])  # a stable subset


def test_a_long_prompt_keeps_its_header_and_latest_turns(tiny_model):
    from transformers import AutoTokenizer

    from engine.train.recipes.rl import fit_prompt, prompt_tokens

    tok = AutoTokenizer.from_pretrained(tiny_model)
    filler = "the file is read then the tests run " * 12
    prompt = [SYSTEM, {"role": "user", "content": "Fix main.py."}]
    for i in range(8):
        prompt += [{"role": "assistant", "content": f'<tool_call>{{"name": "Read", "arguments": {{"n": {i}}}}}'
                                                    "</tool_call>"},
                   {"role": "tool", "content": f"{i} {filler}"}]
    prompt.append({"role": "user", "content": "And now?"})
    full = prompt_tokens(tok, prompt)
    assert fit_prompt(prompt, tok, full) == prompt
    limit = full // 2
    fitted = fit_prompt(prompt, tok, limit)
    assert prompt_tokens(tok, fitted) <= limit
    assert fitted[:2] == prompt[:2] and fitted[-1] == prompt[-1]  # header kept, the latest turn kept
    assert fitted[2]["role"] != "tool"  # no tool result without its call
    assert fitted[2:] == prompt[len(prompt) - len(fitted) + 2:]  # the oldest turns went, in one piece
    assert fit_prompt(prompt, tok, prompt_tokens(tok, prompt[:2]) - 1) is None  # not even the header fits


def test_a_context_whose_last_message_cannot_fit_is_left_out_with_a_warning(tmp_path, tiny_model):
    from engine.train.recipes.rl import prompt_tokens

    session = agent_session()
    session["messages"][3]["content"] = "def add(a, b): return a - b\n" * 200  # a huge file read
    recipe = make_recipe("grpo", tmp_path, [session], tiny_model, max_length=320, max_completion_length=64)
    rows = recipe.rows([session])
    assert len(rows) == 3  # the context ending with the huge result is left out; later ones drop it
    assert all(prompt_tokens(recipe.tokenizer, r["prompt"]) <= 256 for r in rows)
    assert all("return a - b\ndef" not in m["content"] for r in rows for m in r["prompt"])
    warnings = [e.message for e in recipe.server.events if getattr(e, "level", "") == "warning"]
    assert warnings == ["1 of 4 prompts left out: even without their middle turns they exceed 256 tokens "
                        "(max_length 320 - max_completion_length 64)"]
    assert json.loads(rows[-1]["reward_context"])["seen_paths"] == ["main.py"]  # judged on the whole context


@pytest.mark.parametrize("hyper, message", [
    (dict(batch_size=3, grad_accum=1, num_generations=4), "whole groups"),
    (dict(num_generations=1), "at least 2 generations"),
    (dict(max_length=128, max_completion_length=120), "no room left for the prompt"),
    (dict(reward_weights={"speed": 1.0}), "reward weights"),
])
def test_unusable_settings_are_refused_with_the_reason(tmp_path, tiny_model, hyper, message):
    recipe = make_recipe("rloo", tmp_path, [agent_session()], tiny_model, **hyper)
    with pytest.raises(EngineError, match=message):
        recipe.rows([agent_session()])


# --- plan and config -----------------------------------------------------------------------------------------------

def test_the_plan_counts_prompts_per_generation_and_inner_epochs(tmp_path, tiny_model):
    recipe = make_recipe("grpo", tmp_path, [agent_session()], tiny_model, batch_size=2, grad_accum=8,
                         num_generations=4, epochs=1, max_steps=1000)
    assert recipe.prompts_per_generation() == 4 and recipe.examples_per_step() == 1.0
    assert recipe.plan_steps(100) == 100  # 25 generations x 4 inner epochs: A.1's "100 episodes"
    assert recipe.plan_steps(10) == 8  # TRL's sampler leaves out the last, incomplete generation
    assert recipe.plan_steps(2) == 4  # fewer prompts than a generation: one (filled) generation
    recipe.h.max_steps = 6
    assert recipe.plan_steps(100) == 6


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_trl_config(tmp_path, tiny_model, kind):
    recipe = make_recipe(kind, tmp_path, [agent_session()], tiny_model, batch_size=2, grad_accum=8,
                         num_generations=4, max_completion_length=64, reward_weights={"reasoning": 0.0})
    args = recipe.training_args(steps=10, has_eval=True)
    assert type(args).__name__ == ("GRPOConfig" if kind == "grpo" else "RLOOConfig")
    assert args.learning_rate == 1.4e-5 and args.num_iterations == 4 and args.num_generations == 4
    assert args.generation_batch_size == 16 and args.steps_per_generation == 8
    assert args.per_device_eval_batch_size == 4  # whole groups of generations in an eval batch too
    assert args.max_completion_length == 64 and not args.use_vllm and args.disable_dropout
    assert args.reward_weights == pytest.approx([0.25 / 0.8, 0.20 / 0.8, 0.15 / 0.8, 0.20 / 0.8])
    assert args.beta == (0.04 if kind == "grpo" else 0.01)
    if kind == "rloo":
        assert args.normalize_advantages


def test_dry_run_plans_prompts_and_tokens(tmp_path, tiny_model):
    recipe = make_recipe("grpo", tmp_path, [agent_session(i) for i in range(4)], tiny_model, batch_size=2,
                         grad_accum=4, num_generations=4, max_completion_length=32, epochs=1, max_steps=1000)
    plan = recipe.dry_run()
    assert plan.ok and plan.recipe == "grpo" and plan.examples == 16
    assert plan.steps == 8 * 4  # 16 prompts, 2 per generation, 4 inner epochs
    rows = recipe.rows([agent_session(i) for i in range(4)])
    from engine.train.recipes.rl import prompt_tokens

    assert plan.tokens == sum(4 * (prompt_tokens(recipe.tokenizer, r["prompt"]) + 32) for r in rows)


# --- real jobs through the engine ------------------------------------------------------------------------------------

def _job_events(manager, job):
    run = manager.latest_run(job.id)
    return Path(run.run_dir), read_events(Path(run.run_dir) / "events.jsonl")


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_the_reward_rises(manager, tmp_path, tiny_model, kind):
    """Full fine-tuning of the tiny model towards reasoning depth (more distinct sentences of three or more words, some
    with a marker word): untrained it scores ~0.15, after 40 steps ~0.22-0.31. LoRA cannot show it on this model: its
    next-token distribution is near uniform (logits from small tied embeddings through a norm LoRA does not train) and
    stays so.

    The engine runs as a subprocess on the job's spec, as `launch` starts it, but is not finalised by the manager:
    app.core.train.results accepts only adapter folders, so a full fine-tuning result (model/) is refused whatever the
    recipe (reported to the lead)."""
    from app.core.train.jobs import engine_command

    data = write_jsonl(tmp_path / "questions.jsonl", question_records(16))
    hyper = Hyper(method="full", max_steps=40, epochs=100, grad_accum=1, num_generations=4, max_completion_length=32,
                  max_length=256, warmup=0.0, save_steps=20, reward_weights=REASONING_ONLY, **SETTINGS[kind])
    job = manager.submit(data, model=str(tiny_model), hyper=hyper, kind=kind, start=False)
    spec, _ = JobSpec.read(Path(job.spec_path))
    run_dir = Path(spec.run_dir)
    done = subprocess.run(engine_command(spec, job.spec_path), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    events = read_events(run_dir / "events.jsonl")
    assert states(events)[-1] == "completed"
    metrics = [e.body for e in of_type(events, "metrics")]
    assert len(metrics) == 40 and all(m.loss is not None for m in metrics)
    scored = [m for m in metrics if m.reward is not None]
    assert len(scored) == 10  # one generation every 4 steps (4 inner epochs)
    assert all(set(m.rewards) == {"reasoning"} for m in scored)
    rewards = [m.reward for m in scored]
    first, last = statistics.fmean(rewards[:3]), statistics.fmean(rewards[-3:])
    assert last > first + 0.04, rewards  # not learning: within ~0.02; seen +0.076 to +0.16 over 16 random tiny models
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "completed" and result["recipe"] == kind and result["metrics"]["steps"] == 40
    assert result["metrics"]["last_reward"] == pytest.approx(rewards[-1])
    assert (run_dir / "model" / "model.safetensors").is_file()


def _start_adapter(tiny_model: Path, out: Path) -> Path:
    """A LoRA adapter as an earlier (SFT) job would leave it."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from engine.train.adapters import lora_config

    spec = JobSpec(job_id="x", dataset_path="x", dataset_sha256="x", models_dir="x", run_dir="x", socket_path="x",
                   token="x", hyper=Hyper(lora_r=8, lora_alpha=16))
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model), lora_config(spec)).save_pretrained(out)
    return out


@pytest.mark.parametrize("kind, from_adapter", [("grpo", False), ("rloo", True)])
def test_lora_job_on_agent_sessions_saves_a_clean_adapter(manager, tmp_path, tiny_model, kind, from_adapter):
    data = write_jsonl(tmp_path / "sessions.jsonl", [agent_session(i) for i in range(3)])
    held_out = write_jsonl(tmp_path / "eval.jsonl", [agent_session(9)])
    init = str(_start_adapter(tiny_model, tmp_path / "sft-adapter")) if from_adapter else None
    hyper = Hyper(max_steps=8, epochs=100, learning_rate=1e-3, lora_r=8, lora_alpha=16, batch_size=8, grad_accum=1,
                  num_generations=4, max_completion_length=16, max_length=512, warmup=0.0, save_steps=4)
    job = manager.wait(manager.submit(data, model=str(tiny_model), hyper=hyper, kind=kind, init_adapter=init,
                                      eval_data=held_out).id, timeout=600)
    run_dir, events = _job_events(manager, job)
    assert job.state == "completed", job.error
    assert states(events)[-1] == "completed"
    metrics = [e.body for e in of_type(events, "metrics") if e.body.eval_loss is None]
    assert len(metrics) == 8
    evaluations = [e.body.eval_loss for e in of_type(events, "metrics") if e.body.eval_loss is not None]
    assert len(evaluations) == 2  # at the checkpoints; the eval prompts are answered num_generations times too
    scored = [m for m in metrics if m.reward is not None]
    assert len(scored) == 2 and all(set(m.rewards) == COMPONENTS for m in scored)
    assert all(0.0 <= m.reward <= 1.0 for m in scored)
    adapter = run_dir / "adapter"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()
    assert not (adapter / "ref").exists()  # TRL's frozen reference copy is not part of the result
    assert "adapter" in [c.kind for c in manager.checkpoints(job.id)]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["metrics"]["tokens"] > 0  # TRL's own token counter (prompt + completion tokens)
