"""RL recipes: GRPO and RLOO (TRL 1.16 `GRPOTrainer` / `RLOOTrainer`) with the behavioural reward (app.core.judge.rewards).

Data: the snapshot's chat records (agent sessions converted to chat, or plain chats). Every context that ends right
before an assistant message becomes a prompt (`contexts.teacher_contexts`: once each, the longest context of an action
repeated by overlapping windows, at most MAX_PROMPTS by a stable hash of the content). A row is
{"prompt": the context as Hermes-text messages, "reward_context": json.dumps(RewardContext.from_messages(context,
teacher).to_row())}: the completion is judged against the teacher's recorded next step. A prompt longer than
max_length - max_completion_length tokens (TRL 1.16 has no prompt-length limit of its own) keeps its header (system
message + the task's first request) and drops its oldest turns, never leaving a tool result without its call;
a prompt whose header and last message alone do not fit is left out (the log says how many).

The source documents' RL settings ("RL: lr 1.4e-5, 100 episodes, 4 inner epochs") in TRL 1.16 terms:
- lr 1.4e-5: `Hyper.lr("grpo"/"rloo")` (spec.DEFAULT_LR), as every recipe.
- 4 inner epochs (PPO's passes over each rollout batch): `num_iterations` = INNER_EPOCHS = 4 (GRPO's μ): each
  generation batch is trained on for 4 optimiser steps (ratio-clipped at epsilon 0.2), so one step in four generates.
- 100 episodes (rollouts of a prompt): not a separate knob; the plan is the usual min(max_steps, epochs x steps per
  epoch) with an epoch = every prompt rolled out once. A step rolls out (batch x grad_accum x processes) /
  num_generations prompts, num_generations completions each, and trains on them INNER_EPOCHS times: with the
  defaults (2 x 8, 4 generations) 4 prompts per generation, so 100 episodes = 25 generations = 100 optimiser steps.
- KL coefficient (`beta`): the behavioural reward can be gamed (marker words, short answers), so the policy is kept
  near where it started. GRPO: 0.04 (the GRPO paper's value; TRL's default 0.0 drops the reference), a per-token KL
  term in the loss beside group-normalised advantages. RLOO: 0.01, not TRL's 0.05: RLOO subtracts beta x the KL
  *summed over the completion's tokens* from the reward, and on a reward in [0, 1] whose differences within a group
  are ~0.1, 0.05 x a 128-token sum outweighs them (on the tiny test model RLOO learns nothing at 0.05 and as GRPO
  does at 0.01). With LoRA the reference is the model with the adapter disabled, or, when training continues from an
  adapter (`init_adapter`, RL after SFT), TRL's frozen copy of it ("ref", dropped before saving); full fine-tuning
  loads a second copy of the model. `Hyper.beta` is the DPO/ORPO/KTO temperature and is not used here.
- Advantages: GRPO's own (reward minus the group mean, over the group's std); RLOO's leave-one-out baseline with
  `normalize_advantages=True` (whitened per generation batch, as PPO does, so the 1.4e-5 learning rate does not
  depend on the reward's scale).
- Generation: transformers `generate` (no vLLM), temperature 1.0, dropout off (`disable_dropout`: the reference and
  the inner epochs need the same log-probs for the same input).
TRL logs `reward`, `reward_std`, `rewards/<function>/mean|std` (the functions are app.core.judge.rewards.reward_constraint,
reward_reasoning, …), `kl` (beta > 0), `entropy`, `completions/mean_length`, `clip_ratio/*`, `num_tokens`.
"""
from __future__ import annotations

import json
import math

from app.core.base import protocol as P
from app.core.datasets.windows import header_length
from app.core.judge.rewards import RewardContext, normalise_weights, trl_reward_funcs, trl_reward_weights
from app.core.toolcalls.convention import as_text
from engine.train import adapters
from engine.errors import EngineError
from engine.train.recipes.base import Recipe

MAX_PROMPTS = 1000  # contexts taken from one snapshot (a stable subset when there are more)
INNER_EPOCHS = 4  # the 4 inner epochs: optimiser passes over each generation batch (TRL num_iterations)
KL_BETA = {"grpo": 0.04, "rloo": 0.01}
REF_ADAPTER = "ref"  # TRL's frozen copy of a starting adapter, the reference when training continues from one
MESSAGE_OVERHEAD = 6  # tokens a chat template adds around a message's content (estimate; the fit is re-checked)


class RLRecipe(Recipe):
    """Shared by GRPO and RLOO: prompts cut from chat records, the behavioural reward, generation settings."""

    name = "rl"

    # --- data ----------------------------------------------------------------------------------
    def rows(self, records: list[dict]) -> list[dict]:
        if not records:
            return []
        self._check_settings()
        from app.core.datasets.contexts import teacher_contexts

        usable = [{k: v for k, v in r.items() if k != "split"} for r in records if r.get("messages")]
        contexts = teacher_contexts(usable, MAX_PROMPTS, self.h.seed)
        tokenizer = self._tokenizer()
        limit = self.prompt_limit()
        out, dropped = [], 0
        seen: dict[int, tuple[dict, int]] = {}  # contexts of one session share messages: each converted once
        for ctx in contexts:
            for m in ctx.messages:
                if id(m) not in seen:
                    text = as_text(m)
                    seen[id(m)] = text, content_tokens(tokenizer, text)
            prompt = fit_prompt([seen[id(m)][0] for m in ctx.messages], tokenizer, limit,
                                [seen[id(m)][1] for m in ctx.messages])
            if prompt is None:
                dropped += 1
                continue
            ctx_row = RewardContext.from_messages(ctx.messages, ctx.teacher).to_row()
            out.append({"prompt": prompt, "reward_context": json.dumps(ctx_row)})
        if dropped:
            self.server.emit(P.Log(level="warning", message=f"{dropped} of {len(contexts)} prompts left out: even "
                                   f"without their middle turns they exceed {limit} tokens (max_length "
                                   f"{self.h.max_length} - max_completion_length {self.h.max_completion_length})"))
        return out

    def prompt_limit(self) -> int:
        return self.h.max_length - self.h.max_completion_length

    def _tokenizer(self):
        """The tokenizer, loaded on its own when rows are cut before the model (prompts are fitted in tokens)."""
        if self.tokenizer is None:
            self.tokenizer, self.label = adapters.load_tokenizer(self.spec, self._report)
        return self.tokenizer

    def _check_settings(self) -> None:
        h = self.h
        per_generation = h.batch_size * h.grad_accum * max(self.spec.processes, 1)
        if h.num_generations < 2:
            raise EngineError(f"{self.name.upper()} needs at least 2 generations per prompt",
                              why=f"num_generations is {h.num_generations}: the advantage of a completion is "
                                  "measured against the other completions of its prompt",
                              fix="set num_generations to 2 or more (4 is the default)")
        if per_generation % h.num_generations:
            raise EngineError("the batch does not hold whole groups of generations",
                              why=f"batch_size x grad_accum{' x processes' if self.spec.processes > 1 else ''} = "
                                  f"{per_generation} completions per step is not a multiple of num_generations = "
                                  f"{h.num_generations}",
                              fix="make batch_size x grad_accum a multiple of num_generations (e.g. batch 2 x "
                                  "grad_accum 8 with 4 generations: 4 prompts per step)")
        if self.prompt_limit() < 16:
            raise EngineError("no room left for the prompt",
                              why=f"max_length {h.max_length} - max_completion_length {h.max_completion_length} "
                                  f"leaves {self.prompt_limit()} tokens",
                              fix="raise max_length or lower max_completion_length")
        try:
            normalise_weights(h.reward_weights)
        except ValueError as exc:
            raise EngineError("the reward weights are not usable", why=str(exc),
                              fix="give weights >= 0 for constraint, reasoning, efficiency, self_correction, "
                                  "exploration (at least one above 0)") from exc

    # --- plan ----------------------------------------------------------------------------------
    def prompts_per_generation(self) -> int:
        return self.h.batch_size * self.h.grad_accum * max(self.spec.processes, 1) // max(self.h.num_generations, 1)

    def examples_per_step(self) -> float:
        """Prompts one optimiser step consumes: a generation's prompts, trained on INNER_EPOCHS steps."""
        return max(self.prompts_per_generation(), 1) / INNER_EPOCHS

    def plan_steps(self, n_rows: int) -> int:
        """An epoch rolls the prompts out once, a generation's worth at a time (TRL's sampler leaves out a last,
        incomplete one; fewer prompts than a generation are repeated to fill one), and trains on each generation
        INNER_EPOCHS times."""
        generations = max(1, n_rows // max(self.prompts_per_generation(), 1))
        return max(1, min(self.h.max_steps, math.ceil(self.h.epochs * generations * INNER_EPOCHS)))

    def tokens_of(self, rows: list[dict]) -> int:
        """Prompt + at most max_completion_length tokens, num_generations times per prompt (what TRL counts)."""
        return sum(self.h.num_generations * (prompt_tokens(self.tokenizer, r["prompt"]) + self.h.max_completion_length)
                   for r in rows)

    # --- trainer -------------------------------------------------------------------------------
    def recipe_args(self) -> dict:
        h = self.h
        return {
            "num_generations": h.num_generations, "max_completion_length": h.max_completion_length,
            "num_iterations": INNER_EPOCHS, "beta": KL_BETA[self.name],
            "reward_weights": trl_reward_weights(h.reward_weights),
            # GRPO/RLOO generate for the evaluation too: an eval batch must hold whole groups of generations
            "per_device_eval_batch_size": math.lcm(h.batch_size, h.num_generations),
            "disable_dropout": True, "use_vllm": False,
            # TRL counts prompt + completion tokens itself (state.num_input_tokens_seen, logged as num_tokens); the
            # Trainer's own counter cannot read a batch of prompts and would warn at every step
            "include_num_input_tokens_seen": "no",
        }

    def trainer_class(self):
        raise NotImplementedError

    def make_trainer(self, model, args, train, evaluation, peft_config, callbacks):
        train = self._filled(train)
        return self.trainer_class()(model=model, reward_funcs=trl_reward_funcs(self.h.reward_weights), args=args,
                                    train_dataset=train, eval_dataset=evaluation, processing_class=self.tokenizer,
                                    peft_config=peft_config, callbacks=callbacks)

    def _filled(self, train):
        """Fewer prompts than one generation takes are repeated to fill it (TRL's sampler would yield nothing)."""
        need = self.prompts_per_generation()
        if len(train) >= need:
            return train
        self.server.emit(P.Log(message=f"{len(train)} prompt(s), fewer than the {need} a step rolls out: repeated "
                                       "to fill the step"))
        return train.select([i % len(train) for i in range(need)])

    def _callbacks(self) -> list:
        callbacks = super()._callbacks()
        # The RL loss is a clipped policy-gradient surrogate that hovers around 0 (negative as often as not): a rise
        # of it is no divergence. NaN/Inf and gradient explosions are still fatal.
        self.callbacks["checker"].checker.t.divergence_min_rise = math.inf
        return callbacks

    def save_checkpoint(self):
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        if REF_ADAPTER in (getattr(model, "peft_config", None) or {}):
            model.delete_adapter(REF_ADAPTER)  # else save_pretrained writes the frozen copy to adapter/ref/
        return super().save_checkpoint()


class GRPORecipe(RLRecipe):
    name = "grpo"

    def config_class(self):
        from trl import GRPOConfig

        return GRPOConfig

    def trainer_class(self):
        from trl import GRPOTrainer

        return GRPOTrainer


class RLOORecipe(RLRecipe):
    name = "rloo"

    def config_class(self):
        from trl import RLOOConfig

        return RLOOConfig

    def recipe_args(self) -> dict:
        return {**super().recipe_args(), "normalize_advantages": True}

    def trainer_class(self):
        from trl import RLOOTrainer

        return RLOOTrainer


# --- prompts ------------------------------------------------------------------------------------------------------

def prompt_tokens(tokenizer, prompt: list[dict]) -> int:
    """Tokens of a prompt as the trainer renders it (with the assistant header that opens the completion)."""
    return len(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False))


def content_tokens(tokenizer, message: dict) -> int:
    """A message's size in a rendered prompt, estimated: its content's tokens plus the template's wrapping."""
    return len(tokenizer(message["content"], add_special_tokens=False)["input_ids"]) + MESSAGE_OVERHEAD


def fit_prompt(prompt: list[dict], tokenizer, limit: int, sizes: list[int] | None = None) -> list[dict] | None:
    """The prompt within `limit` tokens: its header (system + first request) and its latest messages, the oldest turns
    after the header dropped (a tool result never kept without its call); None when even header + last message do not
    fit. `sizes`: content_tokens of each message. Only a prompt estimated to (nearly) fit is rendered and counted
    exactly, so a long context costs no more than a short one."""
    sizes = sizes if sizes is not None else [content_tokens(tokenizer, m) for m in prompt]
    head = header_length(prompt)
    total = sum(sizes) + MESSAGE_OVERHEAD  # + the assistant header that opens the completion
    near = limit + max(32, limit // 10)  # the estimate is a little off either way
    start = head
    while True:
        if total <= near:
            kept = prompt[:head] + prompt[start:]
            if prompt_tokens(tokenizer, kept) <= limit:
                return kept
        if start >= len(prompt) - 1:
            return None
        following = _next_start(prompt, start + 1)
        total -= sum(sizes[start:following])
        start = following


def _next_start(prompt: list[dict], start: int) -> int:
    """The first message at or after `start` that is not a tool result (whose call would be gone), or the last one."""
    while start < len(prompt) - 1 and prompt[start]["role"] == "tool":
        start += 1
    return start
