"""Kernels that captured decoding steps use in place of transformers' defaults (remote.graph_decode).

Why, measured inside CUDA graphs on an H200 (bench/bench_kernels.py, docs/PERFORMANCE.md):
- RMSNorm: transformers' Qwen3 / Llama-style norm is six kernels per call (cast, pow, mean, add, rsqrt, two
  multiplies), 11-22 us; `F.rms_norm` is one fused kernel, 2-5 us. A step calls it four times per layer.
- Attention with a mask and fewer K/V heads than query heads: transformers' SDPA path repeats K/V to every query
  head (a copy of the whole cache per layer and step) whenever a mask is given and there is more than one query:
  93 us per layer at Qwen3-8B widths for a 65-node verify over 2048 rows. Stacking the query heads that share a
  K/V head along the query axis (`grouped_attention`, no copy) takes 58 us.

Contract: inside `step_kernels(model, drafter)` every RMSNorm of the known classes computes `F.rms_norm(x,
weight, eps)` (the same normalisation in float32 with the weight applied before the one rounding to the input
dtype, where transformers rounds and then multiplies: equal up to one rounding), and a model on transformers' SDPA
attends through `grouped_attention` whenever a mask is given; on exit both are undone, so prefill, the eager loop
and stock `generate` run transformers' own code. Classes with another norm formula (Qwen3.5's `1 + weight`, gated
norms) and other attention implementations are left alone. `grouped_attention` is also the drafter's attention.
"""
from __future__ import annotations

import contextlib
import types

import torch
from torch.nn import functional as F

FUSABLE = ("Qwen3RMSNorm", "Qwen2RMSNorm", "LlamaRMSNorm", "MistralRMSNorm")
GROUPED = "grouped_sdpa"        # the attention implementation name registered with transformers


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                      scale: float | None) -> torch.Tensor:
    """SDPA with fewer K/V heads than query heads, without repeating K/V: the query heads that share a K/V head
    are stacked along the query axis, and a per-query mask with them. q [1, Hq, Q, D], k / v [1, Hkv, K, D],
    mask None, or bool / additive [Q or 1, K] -> [1, Hq, Q, D]."""
    _, heads, q_len, dim = q.shape
    groups = heads // k.shape[1]
    if mask is not None and mask.shape[0] > 1:
        mask = mask.repeat(groups, 1)                                  # row g * Q + i: query i of group member g
    out = F.scaled_dot_product_attention(q.reshape(1, k.shape[1], groups * q_len, dim), k, v, attn_mask=mask,
                                         scale=scale)
    return out.view(1, heads, q_len, dim)


def _grouped_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' attention-function signature; batch 1 with a mask shared by the heads ([1, 1, Q, K])."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_mask is None or query.shape[0] != 1 or query.shape[1] == key.shape[1]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = grouped_attention(query, key, value, attention_mask[0, 0], scaling)
    return out.transpose(1, 2).contiguous(), None


def _register() -> bool:
    """Make GROUPED known to transformers (attention and mask functions); False where this version cannot."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(GROUPED, _grouped_sdpa)
        AttentionMaskInterface.register(GROUPED, sdpa_mask)
        return True
    except (ImportError, AttributeError):
        return False


def _fused_norm(self, hidden_states: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(hidden_states, (hidden_states.shape[-1],), self.weight, self.variance_epsilon)


@contextlib.contextmanager
def step_kernels(model: torch.nn.Module, drafter: torch.nn.Module | None = None):
    """Yields the number of norms replaced."""
    norms = [m for root in (model, drafter) if root is not None for m in root.modules()
             if type(m).__name__ in FUSABLE]
    for norm in norms:
        norm.forward = types.MethodType(_fused_norm, norm)
    config = model.config
    swap = getattr(config, "_attn_implementation", None) == "sdpa" and _register()
    if swap:
        config._attn_implementation = GROUPED
    try:
        yield len(norms)
    finally:
        for norm in norms:
            del norm.forward                     # back to the class's own forward
        if swap:
            config._attn_implementation = "sdpa"
