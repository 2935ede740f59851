"""DPO, ORPO and KTO through the real engine subprocess on the tiny model: capital-city pairs (the right capital is
chosen, a wrong one rejected). Each job completes, validates, saves its adapter, its loss falls, and the adapter
prefers the right capital more than the base model does."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from app.core.datafiles.chatfile import DatasetError
from app.core.train.events import read_events
from app.core.train.results import validate
from app.core.train.spec import JobSpec
from tests.conftest import fast_hyper, write_jsonl
from tests.engine.helpers import of_type, states

CAPITALS = {"France": "Paris", "Spain": "Madrid", "Italy": "Rome", "Germany": "Berlin"}
# Wrong capitals no pair has as its right one: a random 2-layer model cannot learn which capital goes with which
# country in a few steps, but it can learn to prefer these four cities to those (so the direction is still tested)
WRONG = ["London", "Vienna", "Lisbon"]
# Each kind's hyper-parameters and the drop its loss must show (mean of the last 5 logged losses vs the first 5);
# a recipe that does not train stays at its starting loss. beta 0.5 (not 0.1) makes the small changes a tiny model
# manages in 20 steps visible in the loss; KTO at 2e-2 oscillates. Seen on this machine (first 5 -> last 5):
# dpo 0.46 -> 0.12, orpo 6.21 -> 5.87, kto 0.44 -> 0.22.
SETTINGS = {"dpo": dict(hyper=dict(learning_rate=2e-2, beta=0.5), drop=0.2),
            "orpo": dict(hyper=dict(learning_rate=2e-2, beta=0.5), drop=0.2),
            "kto": dict(hyper=dict(learning_rate=1e-2, beta=0.5), drop=0.1)}
STEPS = 20
# The engines these tests start use one thread: on a 2-core machine shared with other work, torch's default (one
# per core) spins and doubles the CPU a tiny model's job takes (~25 -> ~10 CPU-s a job).
ONE_THREAD = "1"


def preference_records(n: int = 24) -> list[dict]:
    """Pairs in our own datasets' shape (prompt = messages, chosen/rejected = [assistant]) with extra fields."""
    out = []
    for i in range(n):
        country = list(CAPITALS)[i % len(CAPITALS)]
        right, wrong = CAPITALS[country], WRONG[(i // len(CAPITALS)) % len(WRONG)]
        out.append({"id": f"pair-{i}", "session_id": "s1", "prompt": [
            {"role": "user", "content": f"What is the capital of {country}?"}],
            "chosen": [{"role": "assistant", "content": f"The capital of {country} is {right}."}],
            "rejected": [{"role": "assistant", "content": f"The capital of {country} is {wrong}."}]})
    return out


@pytest.fixture(scope="module")
def jobs(tmp_path_factory, tiny_model):
    """One finished job per kind, run one after the other: {kind: (manager, job)}."""
    from app.core.base.store import Store
    from app.core.train.jobs import JobManager

    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NIGHTSCHOOL_HOME", str(home))
        mp.setenv("OMP_NUM_THREADS", ONE_THREAD)
        data = write_jsonl(home / "pairs.jsonl", preference_records())
        manager = JobManager(Store())
        done = {}
        for kind, settings in SETTINGS.items():
            job = manager.submit(data, model=str(tiny_model), kind=kind,
                                 hyper=fast_hyper(max_steps=STEPS, save_steps=10, **settings["hyper"]))
            done[kind] = (manager, manager.wait(job.id, timeout=300))
        yield done


def _losses(manager, job) -> list[float]:
    events = read_events(Path(manager.latest_run(job.id).run_dir) / "events.jsonl")
    return [e.body.loss for e in of_type(events, "metrics") if e.body.loss is not None]


def margin(model, tok, prompt: list[dict], chosen: str, rejected: str) -> float:
    """log p(chosen) - log p(rejected) of the completion tokens, given the prompt."""
    import torch

    def logp(text: str) -> float:
        start = len(tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False))
        ids = tok.apply_chat_template(prompt + [{"role": "assistant", "content": text}], tokenize=True,
                                      return_dict=False)
        x = torch.tensor([ids])
        with torch.no_grad():
            logps = model(input_ids=x).logits[0, :-1].log_softmax(-1)
        return logps.gather(-1, x[0, 1:, None])[start - 1:].sum().item()

    return logp(chosen) - logp(rejected)


def mean_margins(model_dir: Path, adapter: str) -> tuple[float, float]:
    """(base model's, adapter's) mean margin of the right capital over the wrong ones."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), adapter).eval()
    tok = AutoTokenizer.from_pretrained(adapter)
    cases = [([{"role": "user", "content": f"What is the capital of {country}?"}],
              f"The capital of {country} is {right}.", f"The capital of {country} is {wrong}.")
             for country, right in CAPITALS.items() for wrong in WRONG]
    trained = sum(margin(model, tok, *c) for c in cases) / len(cases)
    with model.disable_adapter():
        base = sum(margin(model, tok, *c) for c in cases) / len(cases)
    return base, trained


@pytest.mark.parametrize("kind", list(SETTINGS))
def test_job_completes_loss_falls_and_the_adapter_prefers_chosen(jobs, kind, tiny_model):
    manager, job = jobs[kind]
    assert job.state == "completed", job.error
    run_dir = Path(manager.latest_run(job.id).run_dir)
    events = read_events(run_dir / "events.jsonl")
    assert states(events)[-1] == "completed"

    losses = _losses(manager, job)
    assert len(losses) == STEPS and all(math.isfinite(v) for v in losses)
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - SETTINGS[kind]["drop"], losses
    if kind == "dpo":  # the policy starts as its reference: the first loss is -log sigmoid(0)
        assert losses[0] == pytest.approx(math.log(2), abs=1e-3)

    spec, _ = JobSpec.read(Path(job.spec_path))
    raw = json.loads((run_dir / "result.json").read_text())
    assert validate(raw, spec, job.spec_sha256).status == "completed"
    assert raw["recipe"] == kind and raw["metrics"]["steps"] == STEPS and raw["metrics"]["tokens"] > 0
    adapter = Path(raw["adapter_path"])
    assert (adapter / "adapter_model.safetensors").is_file() and not (adapter / "ref").exists()
    kinds = [c.kind for c in manager.checkpoints(job.id)]
    assert kinds.count("checkpoint") == 2 and kinds[-1] == "adapter"

    base, trained = mean_margins(tiny_model, str(adapter))
    assert trained > base + 1.0, (base, trained)


def test_dpo_continues_from_a_starting_adapter(jobs, tiny_model, tmp_path, monkeypatch):
    """init_adapter: the trainer gets a PeftModel and no peft_config. The reference is the starting adapter (the first
    loss is log 2 although that adapter already prefers the right capitals), training moves on from it, and only the
    trained adapter is saved (TRL keeps the reference as a second adapter, "ref", which would land in adapter/ref/).
    The learning rate is lower: Adam's first steps at 2e-2 knock a trained adapter off course before it recovers."""
    from app.core.base.store import Store
    from app.core.train.jobs import JobManager

    monkeypatch.setenv("OMP_NUM_THREADS", ONE_THREAD)
    manager, orpo = jobs["orpo"]
    start = json.loads((Path(manager.latest_run(orpo.id).run_dir) / "result.json").read_text())["adapter_path"]
    data = write_jsonl(tmp_path / "pairs.jsonl", preference_records())
    manager = JobManager(Store())
    job = manager.submit(data, model=str(tiny_model), kind="dpo", init_adapter=start,
                         hyper=fast_hyper(max_steps=10, save_steps=100, learning_rate=5e-3, beta=0.5))
    job = manager.wait(job.id, timeout=300)
    assert job.state == "completed", job.error
    losses = _losses(manager, job)
    assert losses[0] == pytest.approx(math.log(2), abs=1e-3) and max(losses[-3:]) < 0.65, losses
    adapter = Path(json.loads((Path(manager.latest_run(job.id).run_dir) / "result.json").read_text())["adapter_path"])
    assert [p.name for p in adapter.iterdir() if p.is_dir()] == []
    assert mean_margins(tiny_model, str(adapter))[1] > mean_margins(tiny_model, start)[1] + 0.3


def test_kto_refuses_a_batch_of_one_before_loading_the_model(tmp_path):
    """KTO estimates its KL term from the other rows of a batch; rows() is the first thing setup and dry runs do."""
    from app.core.train.spec import Hyper
    from engine.errors import EngineError
    from engine.train.recipes.preference import KTORecipe

    spec = JobSpec(job_id="j", kind="kto", dataset_path=str(tmp_path / "d.jsonl"), dataset_sha256="0" * 64,
                   models_dir=str(tmp_path), run_dir=str(tmp_path), socket_path=str(tmp_path / "s"), token="t",
                   hyper=Hyper(batch_size=1, grad_accum=8))
    with pytest.raises(EngineError, match="KTO needs a batch size of at least 2") as info:
        KTORecipe(spec, "0" * 64, server=None).rows(preference_records(4))
    assert "gradient accumulation" in info.value.fix
    spec.hyper.batch_size = 2
    assert len(KTORecipe(spec, "0" * 64, server=None).rows(preference_records(4))) == 8


def test_a_chat_file_submitted_as_dpo_is_refused(manager, chat_file, tiny_model):
    with pytest.raises(DatasetError, match="no usable preference record") as info:
        manager.submit(chat_file, model=str(tiny_model), kind="dpo")
    assert '"prompt"' in str(info.value) and "no `prompt`, `chosen`, `rejected` field" in str(info.value)


# --- the data shaping, without training --------------------------------------------------------------------------

def test_pairs_become_conversational_and_extra_fields_are_dropped():
    from engine.train.recipes.preference import pair

    row = pair({"id": 1, "prompt": "What is the capital of Spain?", "chosen": "Madrid.", "rejected": "Rome.",
                "session_id": "x"})
    assert row == {"prompt": [{"role": "user", "content": "What is the capital of Spain?"}],
                   "chosen": [{"role": "assistant", "content": "Madrid."}],
                   "rejected": [{"role": "assistant", "content": "Rome."}]}
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "read", "arguments": '{"path": "a.py"}'}}]}
    row = pair({"prompt": [{"role": "system", "content": "Be brief."},
                           {"role": "user", "content": [{"type": "text", "text": "Open a.py"}]}],
                "chosen": [call], "rejected": [{"role": "assistant", "content": "No."}]})
    assert row["prompt"][1] == {"role": "user", "content": "Open a.py"}
    assert row["chosen"] == [{"role": "assistant",
                              "content": '<tool_call>{"name": "read", "arguments": {"path": "a.py"}}</tool_call>'}]


@pytest.mark.parametrize("n,batch", [(24, 4), (10, 4), (5, 2), (7, 3), (3, 4)])
def test_kto_rows_mix_labels_and_pairs_within_each_batch(n, batch):
    from engine.train.recipes.preference import pair, unpaired

    pairs = [pair({"prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}"}) for i in range(n)]
    rows = unpaired(pairs, batch, seed=42)
    assert len(rows) == 2 * n
    assert sorted((r["prompt"][0]["content"], r["label"]) for r in rows) == sorted(
        (f"q{i}", label) for i in range(n) for label in (True, False))
    for r in rows:
        assert r["completion"][0]["content"].startswith("good" if r["label"] else "bad")
    for start in range(0, len(rows), batch):
        chunk = rows[start:start + batch]
        prompts = [r["prompt"][0]["content"] for r in chunk]
        if n >= batch:  # KTO's KL term pairs a prompt with a neighbour's completion: another pair's
            assert len(set(prompts)) == len(prompts), prompts
        if len(chunk) > 1:
            assert {r["label"] for r in chunk} == {True, False}


@pytest.mark.parametrize("model", ["tiny", "smollm2"])
def test_orpo_rendering_splits_prompt_and_completion_on_the_template(model, tiny_model):
    """The model's own template: the prompt ends with the assistant header, each completion with <|im_end|> (ORPO adds
    EOS itself), and prompt + completion is exactly what the template renders, less the newline after <|im_end|>."""
    from transformers import AutoTokenizer

    from engine.train.recipes.preference import pair, rendered_pair

    path = tiny_model if model == "tiny" else Path.home() / ".local/share/nightschool/models/smollm2-135m-instruct"
    if not (Path(path) / "tokenizer_config.json").is_file():
        pytest.skip("the embedded SmolLM2 has not been materialised on this machine")
    tok = AutoTokenizer.from_pretrained(path)
    row = pair({"prompt": "What is the capital of Spain?", "chosen": "Madrid.", "rejected": "Rome."})
    out = rendered_pair(row, tok)
    assert out["prompt"].endswith("<|im_start|>assistant\n")
    assert out["chosen"] == "Madrid.<|im_end|>" and out["rejected"] == "Rome.<|im_end|>"
    full = tok.apply_chat_template(row["prompt"] + row["chosen"], tokenize=False)
    assert out["prompt"] + out["chosen"] + "\n" == full
    # DPO/KTO tokenise prompt and prompt+completion themselves: the prompt's tokens must be a prefix
    prompt_ids = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)
    full_ids = tok.apply_chat_template(row["prompt"] + row["chosen"], tokenize=True, return_dict=False)
    assert full_ids[:len(prompt_ids)] == prompt_ids
