"""The SFT loss weighted towards tool calls (`action_weight`): which tokens are a call's, and the loss they give."""
from __future__ import annotations

import pytest

from engine.train.chunked_loss import Actions, action_weights
from tests.engine.test_sft_lean import fresh_model, tokenised, training_tokenizer

CALL = '<tool_call>{"name": "Read", "arguments": {"file_path": "app.py"}}</tool_call>'


def test_the_weights_cover_each_call_from_its_opening_to_its_closing_marker():
    marks = Actions(suffix=(5, 6), close_lead=(9,), weight=3.0)
    #           prose  "<"  tool_call>  args  "</" tool_call>  prose  "<" tool_call> (never closed)
    targets = [1, 2, 4, 5, 6, 7, 8, 9, 5, 6, 2, 4, 5, 6, 7]
    assert action_weights(targets, marks) == [1, 1, 3, 3, 3, 3, 3, 3, 3, 3, 1, 3, 3, 3, 3]
    assert action_weights([1, 9, 5, 6, 2], marks) == [1] * 5  # a closing marker with no call open weighs nothing


def test_the_markers_are_found_in_a_real_tokenizer_and_cover_exactly_the_call(tiny_model):
    tokenizer = training_tokenizer(tiny_model)
    marks = Actions.of(tokenizer, 4.0)
    text = f"I will read it first.\n{CALL}\nDone: app.py reads the settings."
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    weights = action_weights(ids, marks)
    heavy = tokenizer.decode([t for t, w in zip(ids, weights) if w == 4.0])
    assert heavy.strip() == CALL
    assert tokenizer.decode([t for t, w in zip(ids, weights) if w == 1.0]).replace(" ", "") == \
        "Iwillreaditfirst.\n\nDone:app.pyreadsthesettings.".replace(" ", "")


def test_the_weighted_loss_is_the_weighted_mean_of_the_token_losses(tiny_model):
    """Through the engine's chunked head: weight 1 gives the plain loss; weight 5 gives Σ w·nll / Σ w over the labelled
    tokens, with w 5 on the call's tokens (more than the plain loss when the call is harder than the prose)."""
    import torch
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from engine.train import chunked_loss

    tokenizer = training_tokenizer(tiny_model)
    records = [{"messages": [{"role": "user", "content": "Open the settings."},
                             {"role": "assistant", "content": f"Reading it.\n{CALL}"}]}] * 2
    batch = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id)(tokenised(tokenizer, records))
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    marks = Actions.of(tokenizer, 5.0)

    def loss(actions):
        model = fresh_model(tiny_model)
        assert chunked_loss.install(model, actions)
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True).loss.item()

    plain = fresh_model(tiny_model)
    with torch.no_grad():
        logits = plain(input_ids=ids, attention_mask=mask).logits[:, :-1]
    targets = labels[:, 1:]
    nll = -torch.log_softmax(logits.float(), -1).gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    valid = targets != -100
    w = torch.tensor([action_weights(row.tolist(), marks) for row in targets]) * valid
    assert 0 < int((w == 5.0).sum()) < int(valid.sum())  # some labelled tokens are the call's, not all
    assert loss(None) == pytest.approx(float(nll[valid].mean()), abs=1e-5)
    assert loss(Actions.of(tokenizer, 1.0)) == pytest.approx(loss(None), abs=1e-6)
    assert loss(marks) == pytest.approx(float((w * nll).sum() / w.sum()), abs=1e-5)
