"""Engine SFT made faster and leaner: padding-free attention per packed example, the loss in chunks, the packed plan."""
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from app.core.train.events import read_events
from tests.conftest import fast_hyper, write_jsonl
from tests.engine.helpers import of_type
from tests.tiny_model import chat_records


def mixed_records(n: int) -> list[dict]:
    """Capital-city chats whose answers repeat 1 to 5 times: examples of very different lengths."""
    out = []
    for i, r in enumerate(chat_records(n)):
        user, answer = r["messages"]
        out.append({"messages": [user, {"role": "assistant", "content": " ".join([answer["content"]] * (1 + i % 5))}]})
    return out


def training_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    from engine.chat_template import training_template

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.chat_template = training_template(tokenizer.chat_template)
    return tokenizer


def tokenised(tokenizer, records: list[dict]) -> list[dict]:
    """Each example as TRL tokenises it for assistant-only loss: labels only on the assistant's tokens."""
    out = []
    for r in records:
        enc = tokenizer.apply_chat_template(r["messages"], tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
        ids, mask = list(enc["input_ids"]), list(enc["assistant_masks"])
        out.append({"input_ids": ids, "labels": [t if m else -100 for t, m in zip(ids, mask)]})
    return out


def fresh_model(folder: Path):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)


def per_example_losses(log_probs, label_mask, bounds) -> list[float]:
    """Mean negative log-likelihood of each example's labelled tokens (the loss it would have alone). Position t of
    the shifted `log_probs` scores token t + 1: an example [s, e) is scored at [s, e - 1)."""
    out = []
    for s, e in itertools.pairwise(bounds):
        lp, m = log_probs[0, s:e - 1], label_mask[0, s:e - 1]
        out.append(float(-(lp * m).sum() / m.sum()))
    return out


def test_padding_free_sft_gives_each_example_the_loss_it_has_padded(tiny_model):
    """One forward pass of the engine's padding-free path (per-example attention + chunked head) on a packed row gives
    every example the loss it has in a padded batch with plain sdpa; padded batches and generation are unchanged."""
    import torch
    import torch.nn.functional as F
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling
    from trl.trainer.utils import add_fused_lm_head

    from engine.train import attention
    from engine.train import chunked_loss

    tokenizer = training_tokenizer(tiny_model)
    examples = tokenised(tokenizer, mixed_records(6))
    assert len({len(e["input_ids"]) for e in examples}) >= 4  # really mixed lengths
    packed = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id, padding_free=True)(examples)
    padded = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id)(examples)

    reference = fresh_model(tiny_model)  # plain sdpa, one padded batch, full logits
    with torch.no_grad():
        logits = reference(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"]).logits
    want = []
    for row, labels in zip(logits, padded["labels"]):
        losses = F.cross_entropy(row[:-1], labels[1:], ignore_index=-100, reduction="none")
        want.append(float(losses.sum() / (labels[1:] != -100).sum()))

    model = fresh_model(tiny_model)
    assert attention.use_padding_free(model) == attention.VARLEN  # CPU: no flash-attention
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))  # what SFTTrainer does, then the engine's
    assert chunked_loss.install(model)
    inputs = {k: v for k, v in packed.items() if k != "seq_idx"}
    with torch.no_grad():
        out = model(**inputs, use_cache=False, fused_lm_head=True)
    bounds = packed["cu_seq_lens_q"].tolist()
    got = per_example_losses(out.log_probs, out.label_mask, bounds)
    assert got == pytest.approx(want, abs=1e-4)

    blind = fresh_model(tiny_model)  # without the boundaries, examples would see each other: the check has teeth
    with torch.no_grad():
        mixed = blind(input_ids=packed["input_ids"], use_cache=True).logits
    lp = torch.log_softmax(mixed[:, :-1], -1).gather(-1, packed["input_ids"][:, 1:, None].clamp(min=0))[..., 0]
    mask = packed["labels"][:, 1:] != -100
    assert max(abs(a - b) for a, b in zip(per_example_losses(lp, mask, bounds), want)) > 1e-3  # 10x the tolerance

    with torch.no_grad():  # a padded batch through the new attention: plain sdpa with its padding mask
        same = model(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"]).logits
    assert torch.allclose(same, logits, atol=1e-5)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of Spain?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    assert torch.equal(model.generate(**prompt, max_new_tokens=8, do_sample=False),
                       reference.generate(**prompt, max_new_tokens=8, do_sample=False))


def test_chunked_loss_equals_the_plain_loss_and_its_gradients(tiny_model, monkeypatch):
    """The chunked head's loss (several chunks: a tiny budget) equals the full-logits cross-entropy to 1e-5, with the
    same gradients on every weight (the tied LM head / embedding included), and the same accuracy and entropy."""
    import torch
    import torch.nn.functional as F
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from engine.train import chunked_loss

    monkeypatch.setattr(chunked_loss, "CHUNK_BYTES", 7 * 4 * 400)  # 7 tokens per chunk on the tiny vocabulary
    tokenizer = training_tokenizer(tiny_model)
    batch = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id)(tokenised(tokenizer, mixed_records(4)))
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]

    plain = fresh_model(tiny_model)
    logits = plain(input_ids=ids, attention_mask=mask).logits[:, :-1]
    targets = labels[:, 1:]
    want = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
    want.backward()

    lean = fresh_model(tiny_model)
    assert chunked_loss.install(lean)
    out = lean(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    assert abs(out.loss.item() - want.item()) < 1e-5
    out.loss.backward()
    grads = dict(plain.named_parameters())
    for name, p in lean.named_parameters():
        assert torch.allclose(p.grad, grads[name].grad, atol=1e-5, rtol=1e-4), name

    valid = targets != -100
    with torch.no_grad():
        probs = torch.softmax(logits, -1)
        entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1)
        top1 = logits.argmax(-1) == targets
    assert torch.equal(out.label_mask, valid)
    assert torch.equal(out.is_top1[valid], top1[valid])
    assert torch.allclose(out.entropy[valid], entropy[valid], atol=1e-5)


def test_a_packed_job_plans_one_epoch_of_packed_rows(manager, tmp_path, tiny_model):
    """epochs=1 with packing runs ceil(packed rows / rows per step) steps, not ceil(examples / rows per step): the
    trainer ends at epoch 1.0 exactly, the progress the engine reports has the same total, and the dry run's plan
    says the same steps and one pass of tokens."""
    from datasets import Dataset
    from trl.data_utils import pack_dataset

    from app.core.train.spec import JobSpec

    records = mixed_records(36)
    hyper = fast_hyper(packing=True, epochs=1.0, max_length=64, max_steps=1000, save_steps=1000)
    per_step = hyper.batch_size * hyper.grad_accum
    lengths = [min(len(e["input_ids"]), hyper.max_length) for e in tokenised(training_tokenizer(tiny_model), records)]
    rows = len(pack_dataset(Dataset.from_dict({"input_ids": [[0] * n for n in lengths]}), hyper.max_length, "bfd"))
    assert rows < len(records)

    data = write_jsonl(tmp_path / "mixed.jsonl", records)
    dry = manager.wait(manager.submit(data, model=str(tiny_model), hyper=hyper, dry_run=True).id, timeout=180)
    assert dry.state == "validated", dry.error
    plan = json.loads((Path(manager.latest_run(dry.id).run_dir) / "plan.json").read_text())
    assert plan["steps"] == math.ceil(rows / per_step) and plan["tokens"] == sum(lengths)  # one pass, not more

    job = manager.wait(manager.submit(data, model=str(tiny_model), hyper=hyper).id, timeout=300)
    assert job.state == "completed", job.error
    spec, _ = JobSpec.read(Path(job.spec_path))
    metrics = json.loads((Path(spec.run_dir) / "result.json").read_text())["metrics"]
    assert metrics["steps"] == metrics["planned_steps"] == math.ceil(rows / per_step)
    assert metrics["steps"] < math.ceil(len(records) / per_step)  # what the old plan ran: several packed epochs
    events = read_events(Path(spec.run_dir) / "events.jsonl")
    progress = [e.body for e in of_type(events, "progress") if e.body.phase == "train"]
    assert {p.total for p in progress} == {metrics["steps"]}
    assert progress[-1].epoch == pytest.approx(1.0)
    logs = " ".join(e.body.message for e in of_type(events, "log"))
    assert "padding-free attention: sdpa_varlen" in logs and "loss: LM head and cross-entropy in chunks" in logs
