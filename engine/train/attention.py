"""Padding-free attention without flash-attention: sdpa on each packed example's own slice of the row."""
from __future__ import annotations

import itertools
import os

VARLEN = "sdpa_varlen"  # the name registered in transformers' AttentionInterface
FLASH = "flash_attention_2"
SWITCH = "NIGHTSCHOOL_PACKED_ATTENTION"  # "sdpa": leave packed rows to plain sdpa's block mask (benchmarks compare)


def enabled() -> bool:
    return os.environ.get(SWITCH, "").strip().lower() != "sdpa"


def varlen_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """An `AttentionInterface` function. TRL's padding-free collator flattens a batch into one row with `position_ids`
    restarting at each example and `cu_seq_lens_q` (the example boundaries, made for flash-attention's varlen kernels).
    Plain sdpa would mask the whole row block-diagonally and pay (sum L_i)^2; this runs causal sdpa on each example's
    slice, sum L_i^2, with the same result. A padded batch, an unpacked row and generation (one new token, or a cache
    longer than the query) take plain sdpa with the mask transformers built."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    bounds = kwargs.get("cu_seq_lens_q")
    if bounds is None or query.shape[0] != 1 or query.shape[2] == 1 or key.shape[2] != query.shape[2]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    bounds = bounds.tolist()
    outs = [sdpa_attention_forward(module, query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], None, dropout=dropout,
                                   scaling=scaling, is_causal=True)[0]
            for s, e in itertools.pairwise(bounds) if e > s]
    return torch.cat(outs, dim=1), None


def register() -> str:
    """Register `VARLEN` with transformers (idempotent): the attention above, and sdpa's mask so that a padded batch
    keeps its padding mask. Returns the name to set as the model's attention implementation."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(VARLEN, varlen_sdpa)
    AttentionMaskInterface.register(VARLEN, sdpa_mask)
    return VARLEN


def padding_free_choice() -> str:
    """flash-attention 2 where it is installed with a CUDA GPU (its varlen kernels read `cu_seq_lens_q` themselves),
    else the per-example sdpa above (CPU, and GPUs without flash-attn)."""
    import torch
    from transformers.utils import is_flash_attn_2_available

    if torch.cuda.is_available() and is_flash_attn_2_available():
        return FLASH
    return register()


def use_padding_free(model) -> str:
    """Switch a loaded model (not yet wrapped by PEFT) to the padding-free attention; returns the implementation used.
    A model already on flash-attention keeps it. Nothing is saved with the model: transformers does not write the
    attention implementation into config.json, so a saved model or adapter loads with the default (sdpa)."""
    current = getattr(model.config, "_attn_implementation", None) or ""
    if current.startswith("flash_attention"):
        return current
    choice = padding_free_choice()
    model.set_attn_implementation(choice)
    return choice
