"""SFT recipe: TRL SFTTrainer on chat `messages` (LoRA, QLoRA or full), loss on assistant tokens only.

A built dataset's examples carry the exact tokens and assistant mask they were checked with; they are trained as
they are when the model's template still renders them identically, else re-rendered (and the log says so).
"""
from __future__ import annotations

from app.core.base import protocol as P
from engine import chat_template
from engine.train import attention
from engine.train import chunked_loss
from engine.errors import EngineError
from engine.train.recipes.base import Recipe


class SFTRecipe(Recipe):
    name = "sft"
    _lengths: tuple[list[dict], list[int]] | None = None  # (rows, their lengths): the plan and the dry run share them

    def rows(self, records: list[dict]) -> list[dict]:
        return [{"messages": chat_template.normalise(r["messages"]),
                 **({"input_ids": r["input_ids"], "assistant_masks": r["assistant_masks"]}
                    if _pretokenised(r) else {})} for r in records if r.get("messages")]

    def config_class(self):
        from trl import SFTConfig

        return SFTConfig

    def recipe_args(self) -> dict:
        args = {"max_length": self.h.max_length, "assistant_only_loss": True}
        if self.h.packing:
            args.update(packing=True, padding_free=True)
        return args

    def prepare_tokenizer(self) -> None:
        """Swap in a training template with generation markers; the original is saved with the adapter."""
        original = self.tokenizer.chat_template
        patched = chat_template.training_template(original)
        if patched is None:
            raise EngineError("this model's chat template cannot mark assistant tokens",
                              why="loss must fall on assistant turns only, and no training template is known for it",
                              fix="choose a model with a ChatML or TRL-supported chat template")
        if patched != original:
            self.server.emit(P.Log(message="chat template: added {% generation %} markers for assistant-only loss"))
        self.original_template = original
        self.tokenizer.chat_template = patched

    def lengths_of(self, rows: list[dict]) -> list[int]:
        """Each example's trained length: its tokens, cut at max_length as the trainer cuts them."""
        if self._lengths is None or self._lengths[0] is not rows:
            lengths = [len(r["input_ids"]) if "input_ids" in r else len(self.tokenizer.apply_chat_template(
                r["messages"], tokenize=True, return_dict=True)["input_ids"]) for r in rows]
            self._lengths = (rows, [min(n, self.h.max_length) for n in lengths])
        return self._lengths[1]

    def tokens_of(self, rows: list[dict]) -> int:
        return sum(self.lengths_of(rows))

    def rows_per_epoch(self, rows: list[dict]) -> int:
        """Packed: the rows TRL's best-fit-decreasing packing makes of the examples (fewer than the examples)."""
        if not self.h.packing:
            return len(rows)
        return packed_rows(self.lengths_of(rows), self.h.max_length)

    def make_trainer(self, model, args, train, evaluation, peft_config, callbacks):
        from trl import SFTTrainer

        train, evaluation = self._stored_or_rendered(train), self._stored_or_rendered(evaluation)
        if "input_ids" in train.column_names:
            args.assistant_only_loss = False  # TRL refuses it on tokenised rows; their assistant_masks set the labels
        if self.h.packing and attention.enabled():
            base = model.get_base_model() if hasattr(model, "get_base_model") else model
            used = attention.use_padding_free(base)
            self.server.emit(P.Log(message=f"padding-free attention: {used} ({attention.how(base, used)})"))
        trainer = SFTTrainer(model=model, args=args, train_dataset=train, eval_dataset=evaluation,
                             processing_class=self.tokenizer, peft_config=peft_config, callbacks=callbacks)
        base = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
        actions = self._actions()
        if chunked_loss.enabled() and chunked_loss.install(base, actions):
            self.server.emit(P.Log(message="loss: LM head and cross-entropy in chunks of "
                                   f"{chunked_loss.chunk_tokens(base.config.get_text_config().vocab_size)} tokens"
                                   + (f"; tool-call tokens weigh {actions.weight:g}x" if actions else "")))
        elif actions is not None:
            self.server.emit(P.Log(level="warning", message=f"action_weight {actions.weight:g} is not applied: it "
                                   "needs the engine's chunked loss head (a CPU job), and this job uses TRL's own"))
        return trainer

    def _actions(self) -> chunked_loss.Actions | None:
        """The tool-call weighting of the loss (`action_weight`; 1: none), its markers found in this tokenizer."""
        if self.h.action_weight == 1.0:
            return None
        try:
            return chunked_loss.Actions.of(self.tokenizer, self.h.action_weight)
        except ValueError as exc:
            raise EngineError("action_weight cannot be applied with this model's tokenizer", why=str(exc),
                              fix="train with action_weight 1") from None

    def _stored_or_rendered(self, data):
        """Stored tokens when the template reproduces them (checked on the first example), else messages only."""
        if data is None or "input_ids" not in data.column_names:
            return data
        first = data[0]
        rendered = self.tokenizer.apply_chat_template(first["messages"], tokenize=True, return_dict=True,
                                                      return_assistant_tokens_mask=True)
        if list(rendered["input_ids"]) == list(first["input_ids"]):
            self.server.emit(P.Log(message="training on the dataset's stored tokens and assistant masks"))
            return data.remove_columns(["messages"])
        self.server.emit(P.Log(level="warning", message="the dataset was rendered with another chat template than "
                               "this model's: re-rendering its messages (rebuild the dataset for this model)"))
        return data.remove_columns(["input_ids", "assistant_masks"])


def packed_rows(lengths: list[int], max_length: int) -> int:
    """How many rows TRL's best-fit-decreasing packing (SFTConfig's default strategy) makes of these lengths."""
    from datasets import Dataset
    from trl.data_utils import pack_dataset

    return len(pack_dataset(Dataset.from_dict({"input_ids": [[0] * n for n in lengths]}), max_length, "bfd"))


def _pretokenised(record: dict) -> bool:
    return isinstance(record.get("input_ids"), list) and isinstance(record.get("assistant_masks"), list)
