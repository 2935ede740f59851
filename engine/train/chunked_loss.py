"""The SFT loss in chunks of tokens: LM head -> log-probabilities per chunk, recomputed in backward, never whole logits.

TRL 1.16's SFTTrainer already asks the model for per-token log-probabilities (`fused_lm_head=True`), but off CUDA its
tiles are 4096 tokens x 32768 vocabulary entries (512 MB in fp32) with several temporaries of that size, and it scores
every position, prompt and tool output included. This head scores only the positions that carry a label, in chunks of
about `CHUNK_BYTES` of logits, and keeps the output contract TRL's `compute_loss` reads (loss, log_probs, entropy,
is_top1, label_mask), so the loss, `mean_token_accuracy` and `entropy` metrics stay as they were.

With an `Actions` weighting (the `action_weight` hyper-parameter) the tokens of `<tool_call>…</tool_call>` blocks
(tool name and arguments) weigh `weight` times the prose around them; the weights are scaled to a mean of 1 over a
micro-batch's labelled tokens, so the loss keeps its scale (TRL sums the log-probabilities this head returns).
"""
from __future__ import annotations

import functools
import os
import types
from dataclasses import dataclass

CHUNK_BYTES = 64 * 2**20  # fp32 logits per chunk; forward and backward hold about three such buffers
SWITCH = "NIGHTSCHOOL_SFT_HEAD"  # "trl": keep TRL's own fused head (benchmarks compare)


@dataclass(frozen=True)
class Actions:
    """How a tool-call block's tokens are found in the labels: the token ids every marker ends with ("tool_call>"),
    the ids that open a closing marker ("</"), and how much more a block's tokens weigh than prose."""

    suffix: tuple[int, ...]
    close_lead: tuple[int, ...]
    weight: float

    @classmethod
    def of(cls, tokenizer, weight: float, opening: str = "<tool_call>", closing: str = "</tool_call>") -> "Actions":
        """The markers' ids under this tokenizer: their longest common ending, and what precedes it in the closing
        one (a BPE may merge the "<" of an opening marker with the character before it; "</" stays its own)."""
        a = tokenizer(opening, add_special_tokens=False)["input_ids"]
        b = tokenizer(closing, add_special_tokens=False)["input_ids"]
        n = 0
        while n < min(len(a), len(b)) and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
            n += 1
        if n == 0 or n == len(b):
            raise ValueError(f"this tokenizer gives {opening!r} and {closing!r} no common ending to find them by")
        return cls(tuple(b[len(b) - n:]), tuple(b[:len(b) - n]), float(weight))


def action_weights(targets: list[int], actions: Actions) -> list[float]:
    """Per target token: `actions.weight` from an opening marker's first token through its closing marker, else 1.
    An opening marker is the common ending not preceded by the closing lead (the token before it belongs to it); an
    unclosed block runs to the end."""
    k, lead = len(actions.suffix), len(actions.close_lead)
    out = [1.0] * len(targets)
    start = None
    j = 0
    while j <= len(targets) - k:
        if tuple(targets[j:j + k]) != actions.suffix:
            j += 1
            continue
        closing = j >= lead and tuple(targets[j - lead:j]) == actions.close_lead
        if closing and start is not None:
            out[start:j + k] = [actions.weight] * (j + k - start)
            start = None
        elif not closing and start is None:
            start = max(j - 1, 0)
        j += k
    if start is not None:
        out[start:] = [actions.weight] * (len(targets) - start)
    return out


def enabled() -> bool:
    return os.environ.get(SWITCH, "").strip().lower() != "trl"


def chunk_tokens(vocab: int) -> int:
    """Tokens per chunk so that one chunk's fp32 logits take about CHUNK_BYTES."""
    return max(1, CHUNK_BYTES // (4 * max(vocab, 1)))


def _acc_dtype(hidden):
    """fp32 for the logits and the sums (fp64 inputs stay fp64: exact checks)."""
    import torch

    return torch.float64 if hidden.dtype == torch.float64 else torch.float32


def _logits(hidden, weight, bias):
    import torch.nn.functional as F

    return F.linear(hidden, weight, bias).to(_acc_dtype(hidden))


def _token_stats():
    """The autograd Function, built on first use (the module imports without torch)."""
    import torch

    class TokenStats(torch.autograd.Function):
        """(log p(target), entropy, target is the top-1) per token of `hidden @ weight.T + bias`, chunk by chunk.
        Only `log_probs` has a gradient; the backward recomputes each chunk's logits."""

        @staticmethod
        def forward(ctx, hidden, weight, bias, targets, chunk):
            n = hidden.shape[0]
            log_probs = hidden.new_empty(n, dtype=_acc_dtype(hidden))
            entropy, log_z = torch.empty_like(log_probs), torch.empty_like(log_probs)
            top1 = torch.empty(n, dtype=torch.bool, device=hidden.device)
            for s in range(0, n, chunk):
                z = _logits(hidden[s:s + chunk], weight, bias)
                lz = torch.logsumexp(z, dim=-1)
                t = targets[s:s + chunk]
                log_probs[s:s + chunk] = z.gather(-1, t[:, None]).squeeze(-1) - lz
                top1[s:s + chunk] = z.argmax(dim=-1) == t  # argmax is the first maximum: a tie before it is no hit
                z.sub_(lz[:, None])  # log p, in place
                entropy[s:s + chunk] = -(z.exp() * z).sum(-1)
                log_z[s:s + chunk] = lz
            ctx.save_for_backward(hidden, weight, bias, targets, log_z)
            ctx.chunk = chunk
            ctx.mark_non_differentiable(entropy, top1)
            return log_probs, entropy, top1

        @staticmethod
        def backward(ctx, grad_log_probs, _grad_entropy, _grad_top1):
            hidden, weight, bias, targets, log_z = ctx.saved_tensors
            need_h, need_w, need_b = ctx.needs_input_grad[:3]
            acc = _acc_dtype(hidden)
            grad_h = torch.zeros_like(hidden, dtype=acc) if need_h else None
            grad_w = torch.zeros_like(weight, dtype=acc) if need_w else None
            grad_b = torch.zeros_like(bias, dtype=acc) if need_b else None
            w32 = weight.to(acc) if need_h else None
            for s in range(0, hidden.shape[0], ctx.chunk):
                h = hidden[s:s + ctx.chunk]
                g = _logits(h, weight, bias).sub_(log_z[s:s + ctx.chunk, None]).exp_()  # p
                g_out = grad_log_probs[s:s + ctx.chunk].to(g.dtype)
                g.mul_(-g_out[:, None])  # d log p_t / d z_j = 1[j = t] - p_j
                g.scatter_add_(-1, targets[s:s + ctx.chunk, None], g_out[:, None])
                if need_h:
                    grad_h[s:s + ctx.chunk] = g @ w32
                if need_w:
                    grad_w.addmm_(g.t(), h.to(acc))
                if need_b:
                    grad_b.add_(g.sum(0))
            cast = (lambda x, like: None if x is None else x.to(like.dtype))
            return cast(grad_h, hidden), cast(grad_w, weight), (cast(grad_b, bias) if need_b else None), None, None

    return TokenStats


@functools.cache
def token_stats_function():
    return _token_stats()


def token_stats(hidden, weight, bias, targets, chunk: int | None = None):
    """(log_probs, entropy, is_top1) of each row of `hidden` [N, H] against `targets` [N], chunked."""
    chunk = chunk or chunk_tokens(weight.shape[0])
    return token_stats_function().apply(hidden, weight, bias, targets, chunk)


def supported(model) -> bool:
    """A plain head on the CPU (the trainer has placed the model by now). On a GPU, TRL's Triton kernel already
    scores only the labelled positions; a model that scales or soft-caps its logits, or adds a mixture-of-experts
    loss, keeps TRL's own fused head too."""
    head = model.get_output_embeddings()
    if head is None or head.weight.device.type != "cpu":
        return False
    config = model.config.get_text_config()
    scaled = any(getattr(config, key, None) is not None for key in
                 ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling"))
    moe = getattr(config, "output_router_logits", False)  # its aux loss is TRL's to add
    return not scaled and not moe and hasattr(model, "base_model")


def install(model, actions: Actions | None = None) -> bool:
    """Replace the `fused_lm_head=True` forward TRL's SFTTrainer put on `model` (the base model under PEFT) with the
    chunked one; other calls (generation, evaluation with logits) run the model's own forward. False: left as is."""
    if not supported(model):
        return False
    model.forward = types.MethodType(_lean_forward(type(model).forward, actions), model)
    return True


def _lean_forward(original, actions: Actions | None = None):
    @functools.wraps(original)  # generate() validates its kwargs against this signature
    def forward(self, *args, fused_lm_head=False, labels=None, shift_labels=None, num_items_in_batch=None, **kwargs):
        if not fused_lm_head:
            extra = {k: v for k, v in (("labels", labels), ("shift_labels", shift_labels),
                                       ("num_items_in_batch", num_items_in_batch)) if v is not None}
            return original(self, *args, **kwargs, **extra)
        return _scored(self, args, kwargs, labels, shift_labels, num_items_in_batch, actions)
    return forward


def _weighted(log_probs, labels, mask, actions: Actions):
    """log p(target) scaled per token by `action_weights`, the weights normalised to a mean of 1 over `mask`."""
    import torch

    rows = [action_weights(row.tolist(), actions) for row in labels]
    w = torch.tensor(rows, dtype=log_probs.dtype, device=log_probs.device) * mask
    return log_probs * (w * mask.sum().clamp(min=1) / w.sum().clamp(min=1e-12))


def _scored(model, args, kwargs, labels, shift_labels, num_items_in_batch, actions: Actions | None = None):
    from trl.trainer.utils import FusedCausalLMOutput

    kwargs["use_cache"] = False
    hidden = model.base_model(*args, **kwargs).last_hidden_state
    if shift_labels is None:
        hidden, labels = hidden[:, :-1], labels[:, 1:]
    else:
        labels = shift_labels
    head = model.get_output_embeddings()
    hidden, labels = hidden.to(head.weight.device), labels.to(head.weight.device)
    mask = labels != -100
    log_probs, entropy, top1 = token_stats(hidden[mask], head.weight, head.bias, labels[mask])
    # masked_scatter keeps an all-masked micro-batch connected to the graph (a differentiable zero)
    log_probs, entropy, top1 = (x.new_zeros(mask.shape).masked_scatter(mask, x) for x in (log_probs, entropy, top1))
    if actions is not None and actions.weight != 1.0:
        log_probs = _weighted(log_probs, labels, mask, actions)
    loss = -log_probs.sum() / (mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch)
    return FusedCausalLMOutput(loss=loss, log_probs=log_probs, entropy=entropy, is_top1=top1, label_mask=mask)
