"""Preference recipes: DPO and KTO (TRL 1.16 `trl`) and ORPO (`trl.experimental.orpo`) on preference_v1 pairs.

Data: every pair becomes conversational `prompt` / `chosen` / `rejected` message lists (strings become a user or an
assistant message; tool calls become Hermes text; extra fields are dropped), so the trainer applies the model's own
chat template and splits prompt from completion itself (no generation markers are needed).

Reference model: with LoRA the trainers compute the reference log-probs with the adapter disabled (no second copy of
the model); when training continues from an adapter (`init_adapter`) they keep a frozen copy of it as adapter "ref";
full fine-tuning precomputes the reference log-probs once before training, so no second model stays in memory.
"""
from __future__ import annotations

import random

from app.core.toolcalls.convention import as_text
from engine.errors import EngineError
from engine.train.recipes.base import Recipe

REF_ADAPTER = "ref"  # the frozen copy of a starting adapter that DPO/KTO use as reference


def messages(value, role: str) -> list[dict]:
    """A preference field as plain {role, content} messages: a string is one `role` message."""
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    return [as_text(m) for m in value]


def pair(record: dict) -> dict:
    """A preference_v1 record as a conversational pair; other fields (id, session_id …) are dropped."""
    return {"prompt": messages(record["prompt"], "user"), "chosen": messages(record["chosen"], "assistant"),
            "rejected": messages(record["rejected"], "assistant")}


class PreferenceRecipe(Recipe):
    """Shared by DPO, ORPO and KTO: conversational pairs, beta and max_length from the job's hyper-parameters."""

    name = "preference"

    def rows(self, records: list[dict]) -> list[dict]:
        return [pair(r) for r in records if all(k in r for k in ("prompt", "chosen", "rejected"))]

    def recipe_args(self) -> dict:
        return {"beta": self.h.beta, "max_length": self.h.max_length}

    def tokens_of(self, rows: list[dict]) -> int:
        """Both sequences of every pair are trained on (the trainer's token counter sees both)."""
        return sum(_length(self.tokenizer, r["prompt"] + r[side]) for r in rows for side in ("chosen", "rejected"))

    def save_checkpoint(self):
        _drop_reference_adapter(self.trainer)
        return super().save_checkpoint()


class DPORecipe(PreferenceRecipe):
    name = "dpo"

    def config_class(self):
        from trl import DPOConfig

        return DPOConfig

    def recipe_args(self) -> dict:
        # loss_type "sigmoid" (the DPO paper), truncation "keep_start": TRL's defaults. There is no separate prompt or
        # completion length any more in TRL 1.x: `max_length` caps prompt + completion.
        return {**super().recipe_args(), "precompute_ref_log_probs": _full_without_adapter(self)}

    def make_trainer(self, model, args, train, evaluation, peft_config, callbacks):
        from trl import DPOTrainer

        return DPOTrainer(model=model, args=args, train_dataset=train, eval_dataset=evaluation,
                          processing_class=self.tokenizer, peft_config=peft_config, callbacks=callbacks)


class ORPORecipe(PreferenceRecipe):
    """ORPO needs no reference model: an SFT loss on `chosen` plus beta x the odds-ratio loss (beta = lambda)."""

    name = "orpo"

    def config_class(self):
        return _orpo().ORPOConfig

    def make_trainer(self, model, args, train, evaluation, peft_config, callbacks):
        trainer_class = _orpo_trainer_class()
        train, evaluation = self._rendered(train), self._rendered(evaluation)
        return trainer_class(model=model, args=args, train_dataset=train, eval_dataset=evaluation,
                             processing_class=self.tokenizer, peft_config=peft_config, callbacks=callbacks)

    def _rendered(self, data):
        if data is None:
            return None
        return data.map(rendered_pair, fn_kwargs={"tokenizer": self.tokenizer}, remove_columns=data.column_names)


class KTORecipe(PreferenceRecipe):
    """KTO trains on unpaired examples: each pair gives (prompt, chosen, desirable) and (prompt, rejected, not).

    KTOTrainer 1.16 would unpair a paired dataset itself, but it puts all chosen completions first and then all the
    rejected ones, and its sampler is sequential (the KL estimate is built against the neighbours in a fixed-order
    batch), so every batch would hold one label only (on the test pairs its loss then stays at 0.5 for the first
    epoch). The recipe unpairs instead: each batch holds distinct pairs with alternating labels (see `unpaired`).
    """

    name = "kto"

    def rows(self, records: list[dict]) -> list[dict]:
        if self.h.batch_size < 2:
            raise EngineError("KTO needs a batch size of at least 2",
                              why=f"the job's batch size is {self.h.batch_size}: KTO estimates its KL term from the "
                                  "other examples of the same batch, so a batch of 1 cannot train",
                              fix="set the batch size to 2 or more (use gradient accumulation to keep the effective "
                                  "batch size)")
        return unpaired(super().rows(records), self.h.batch_size, self.h.seed)

    def config_class(self):
        from trl import KTOConfig

        return KTOConfig

    def recipe_args(self) -> dict:
        return {**super().recipe_args(), "precompute_ref_log_probs": _full_without_adapter(self)}

    def tokens_of(self, rows: list[dict]) -> int:
        return sum(_length(self.tokenizer, r["prompt"] + r["completion"]) for r in rows)

    def make_trainer(self, model, args, train, evaluation, peft_config, callbacks):
        from trl import KTOTrainer

        return KTOTrainer(model=model, args=args, train_dataset=train, eval_dataset=evaluation,
                          processing_class=self.tokenizer, peft_config=peft_config, callbacks=callbacks)


def unpaired(pairs: list[dict], batch_size: int, seed: int) -> list[dict]:
    """KTO rows from pairs: shuffled once (KTO samples sequentially), then in groups of `batch_size` pairs (the last
    one up to twice that), each group giving the chosen rows of its even pairs and the rejected rows of its odd ones,
    then the others. Every run of `batch_size` consecutive rows (a batch: KTO pairs each row's prompt with its
    neighbour's completion for the KL estimate) thus comes from distinct pairs and mixes both labels."""
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    groups = [[pairs[i] for i in order[start:start + batch_size]] for start in range(0, len(order), batch_size)]
    if len(groups) > 1 and len(groups[-1]) < batch_size:
        short = groups.pop()  # a short last group would put a pair's two rows in one batch
        groups[-1] += short
    rows = []
    for group in groups:
        for flip in (0, 1):
            for j, p in enumerate(group):
                good = (j + flip) % 2 == 0
                rows.append({"prompt": p["prompt"], "completion": p["chosen" if good else "rejected"], "label": good})
    return rows


def rendered_pair(row: dict, tokenizer) -> dict:
    """A conversational pair rendered with the model's template, as ORPOTrainer would (the prompt is what prompt +
    chosen and prompt + rejected share), except that a completion ends on the end-of-turn token: ORPOTrainer appends
    EOS to a completion that does not end with it, and ChatML templates put a newline after <|im_end|>, which would
    train `<|im_end|>\\n<|im_end|>`."""
    prompt = tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
    full = {side: tokenizer.apply_chat_template(row["prompt"] + row[side], tokenize=False)
            for side in ("chosen", "rejected")}
    cut = min(_common_prefix(prompt, text) for text in full.values())
    out = {"prompt": prompt[:cut]}
    eos = tokenizer.eos_token
    for side, text in full.items():
        completion = text[cut:]
        out[side] = completion.rstrip() if eos and completion.rstrip().endswith(eos) else completion
    return out


def _full_without_adapter(recipe: Recipe) -> bool:
    """Full fine-tuning: precompute the reference log-probs (before any step, the model is the reference) instead
    of loading a second copy of the model."""
    return recipe.h.method == "full" and not recipe.spec.init_adapter


def _drop_reference_adapter(trainer) -> None:
    """DPO/KTO from a starting adapter keep a frozen copy of it as adapter "ref"; the saved adapter is the trained one
    only (PeftModel.save_pretrained would otherwise write the copy to adapter/ref/)."""
    model = trainer.accelerator.unwrap_model(trainer.model) if trainer is not None else None
    if model is not None and REF_ADAPTER in (getattr(model, "peft_config", None) or {}):
        model.delete_adapter(REF_ADAPTER)


def _length(tokenizer, messages: list[dict]) -> int:
    """Tokens of a rendered conversation (transformers 5 returns a BatchEncoding unless return_dict=False)."""
    return len(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False))


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _orpo():
    """trl.experimental.orpo, imported knowingly (ORPO left TRL's stable API in 1.x): without its import-time notice."""
    import importlib
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    return importlib.import_module("trl.experimental.orpo")


def _orpo_trainer_class():
    """ORPOTrainer whose token counter sees its batches (chosen_* / rejected_* tensors, no `input_ids`): without it
    the token budget and tokens/s would read 0, and transformers warns at every step."""
    import torch

    class Trainer(_orpo().ORPOTrainer):
        def _track_num_input_tokens(self, inputs):
            if self.args.include_num_input_tokens_seen == "no":
                return
            masks = [inputs[k] for k in ("chosen_attention_mask", "rejected_attention_mask") if k in inputs]
            if not masks:
                return super()._track_num_input_tokens(inputs)
            count = torch.as_tensor(sum(int(m.sum()) for m in masks), device=self.args.device, dtype=torch.int64)
            self.state.num_input_tokens_seen += self.accelerator.gather(count).sum().item()

    return Trainer

