"""The glue around torch's CUDA varlen kernel (shapes, causal window, GQA, float32 cast), checked against the loop."""
from __future__ import annotations

import itertools
from unittest import mock

import pytest
import torch

from engine.train import attention


class Layer(torch.nn.Module):
    num_key_value_groups, is_causal = 3, True


def stand_in_kernel(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1), enable_gqa=False):
    """A stand-in for torch.nn.attention.varlen.varlen_attn, which runs on CUDA only (bench/gpu_check.py's attention
    check compares the real kernel with the loop on a GPU): the same contract, (tokens, heads, dim) in and out."""
    assert q.dtype in (torch.bfloat16, torch.float16) and cu_q.dtype == torch.int32 and window_size == (-1, 0)
    assert max_q == max(b - a for a, b in itertools.pairwise(cu_q.tolist()))
    outs = [torch.nn.functional.scaled_dot_product_attention(
        *(t[s:e].transpose(0, 1) for t in (q, k, v)), is_causal=True, scale=scale, enable_gqa=enable_gqa)
        for s, e in itertools.pairwise(cu_q.tolist())]
    return torch.cat([o.transpose(0, 1) for o in outs])


@pytest.mark.parametrize("dtype,gqa", [(torch.bfloat16, True), (torch.bfloat16, False), (torch.float32, False)])
def test_one_kernel_call_equals_the_per_example_loop(dtype, gqa):
    lengths = [5, 17, 9, 30]
    bounds = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, int(bounds[-1]), 64, generator=g, dtype=dtype) for h in (9, 3, 3))
    loop = attention.varlen_sdpa(Layer(), q, k, v, None, scaling=64 ** -0.5, cu_seq_lens_q=bounds,
                                 max_length_q=30)[0]
    calls = []

    def kernel(*args, **kwargs):
        calls.append(kwargs)
        return stand_in_kernel(*args, **kwargs)

    with mock.patch.object(attention, "_kernel", lambda: (kernel, {"window_size": (-1, 0)}, True, gqa)), \
            mock.patch.object(torch.Tensor, "is_cuda", property(lambda self: True)), \
            mock.patch("torch.cuda.is_bf16_supported", lambda: True):
        one = attention.varlen_sdpa(Layer(), q, k, v, None, scaling=64 ** -0.5, cu_seq_lens_q=bounds,
                                    max_length_q=30)[0]
    assert len(calls) == 1 and calls[0].get("enable_gqa", False) == gqa
    assert one.shape == loop.shape == (1, int(bounds[-1]), 9, 64) and one.dtype == dtype
    assert float((one.float() - loop.float()).abs().max()) < 0.05  # bf16 steps (the float32 case attends in bf16)


def test_the_cpu_keeps_the_loop():
    assert attention._varlen(*(torch.zeros(1, 3, 4, 8) for _ in range(3)), torch.tensor([0, 4]), 4, None) is None
