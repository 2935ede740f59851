"""Padding-free attention without the flash-attn package: torch's varlen kernel on CUDA, else sdpa per example slice."""
from __future__ import annotations

import functools
import inspect
import itertools
import os

VARLEN = "sdpa_varlen"  # the name registered in transformers' AttentionInterface
FLASH = "flash_attention_2"
SWITCH = "NIGHTSCHOOL_PACKED_ATTENTION"  # "sdpa": plain sdpa's block mask; "loop": per-example sdpa even on CUDA


def enabled() -> bool:
    return os.environ.get(SWITCH, "").strip().lower() != "sdpa"


@functools.cache
def _kernel():
    """torch's own varlen flash-attention (`torch.nn.attention.varlen.varlen_attn`, torch >= 2.10) and the keyword
    arguments this torch's version takes for causal masking, or None where it is missing or switched off."""
    if os.environ.get(SWITCH, "").strip().lower() == "loop":
        return None
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    causal = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
    return varlen_attn, causal, "scale" in params, "enable_gqa" in params


def _kernel_dtype(dtype):
    """The dtype the kernel attends in for activations of `dtype` on this CUDA GPU, or None (the loop then): half
    precision as it is; float32 (QLoRA: peft keeps norms in float32) in bf16, as transformers' flash path does."""
    import torch

    if dtype in (torch.float16, torch.bfloat16):
        return dtype
    return torch.bfloat16 if dtype == torch.float32 and torch.cuda.is_bf16_supported() else None


def _varlen(query, key, value, bounds, longest, scaling):
    """One kernel call for the whole packed row (CUDA; float32 attends in bf16), or None where this torch or GPU cannot
    do it. Shapes in: (1, heads, tokens, dim); out: (1, tokens, heads, dim) in the query's dtype, as transformers'
    attention functions return."""
    import torch

    kernel, dtype = _kernel(), query.dtype
    attend = _kernel_dtype(dtype) if kernel is not None and query.is_cuda else None
    if attend is None:
        return None
    query, key, value = (t.to(attend) for t in (query, key, value))
    varlen_attn, causal, takes_scale, takes_gqa = kernel
    if scaling is not None and not takes_scale and abs(scaling - query.shape[-1] ** -0.5) > 1e-6:
        return None
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (tokens, heads, dim)
    extra = dict(causal)
    if takes_scale and scaling is not None:
        extra["scale"] = scaling
    if k.shape[1] != q.shape[1]:
        if takes_gqa:
            extra["enable_gqa"] = True
        else:  # transformers' repeat_kv: each key/value head serves heads // kv_heads query heads in a row
            k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    bounds = bounds.to(device=query.device, dtype=torch.int32)
    if longest is None:
        longest = int(bounds.diff().max())
    out = varlen_attn(q, k, v, bounds, bounds, int(longest), int(longest), **extra)
    return out.unsqueeze(0).to(dtype)


def varlen_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """An `AttentionInterface` function. TRL's padding-free collator flattens a batch into one row with `position_ids`
    restarting at each example and `cu_seq_lens_q` (the example boundaries, made for flash-attention's varlen kernels).
    Plain sdpa would mask the whole row block-diagonally and pay (sum L_i)^2; this pays sum L_i^2 with the same result:
    on CUDA one call of torch's varlen flash-attention kernel, elsewhere causal sdpa on each example's
    slice (a Python loop per layer). A padded batch, an unpacked row and generation (one new token, or a cache longer
    than the query) take plain sdpa with the mask transformers built."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    bounds = kwargs.get("cu_seq_lens_q")
    if bounds is None or query.shape[0] != 1 or query.shape[2] == 1 or key.shape[2] != query.shape[2]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = None if dropout else _varlen(query, key, value, bounds, kwargs.get("max_length_q"), scaling)
    if out is not None:  # the kernel takes no attention dropout (transformers passes 0.0 outside training)
        return out, None
    bounds = bounds.tolist()
    outs = [sdpa_attention_forward(module, query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], None, dropout=dropout,
                                   scaling=scaling, is_causal=True)[0]
            for s, e in itertools.pairwise(bounds) if e > s]
    return torch.cat(outs, dim=1), None


def how(model, used: str) -> str:
    """Which path `used` takes for this model's packed rows, in words for the job's log."""
    import torch

    if used != VARLEN:
        return "each packed example attends to itself"
    if _kernel() is not None and torch.cuda.is_available() and _kernel_dtype(getattr(model, "dtype", None)):
        return "one call of torch's varlen flash-attention kernel per layer"
    return "sdpa on each packed example's slice"


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
