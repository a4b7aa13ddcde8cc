"""Kernels that captured decoding steps use in place of transformers' defaults (remote.decoding.graph).

Contract: inside `step_kernels(model, drafter, compiled)` every RMSNorm of the known classes computes `F.rms_norm(x,
weight, eps)` (the same normalisation in float32 with the weight applied before the one rounding to the input dtype,
where transformers rounds and then multiplies: equal up to one rounding; Qwen3.5 / Qwen3-Next's zero-centred and
gated norms round where transformers does, only their reduction is fused), and `residual_norm` adds a residual and
applies such a norm at once; a model on transformers' SDPA attends through remote.kernels.attention (CUDA) or
`grouped_attention` whenever a mask is given for batch 1; the target's projections that share an input run as one
GEMM each (remote.kernels.fused_linear); with `compiled`, the target's rotary, MLP activation, norms and residual
adds are compiled kernels (remote.kernels.glue); the target's embedding gathers a step's rows in one launch
(remote.kernels.rows). On exit all are undone, so prefill, the eager loop and stock `generate` run transformers' own
code (on the fused weights' views: the same values). Other attention implementations are left alone. `attend` and
`grouped_attention` are also the drafter's attention.
"""
from __future__ import annotations

import contextlib
import types
import weakref

import torch
from torch.nn import functional as F

from . import attention as attention_kernel
from .fused_linear import grouped
from .glue import active, add_rms_norm, add_zero_centred_norm, compiled_glue, gated_norm, norm_rotary, plain, \
    zero_centred_norm
from .rows import MAX_ROWS, gather_rows

FUSABLE = ("Qwen3RMSNorm", "Qwen2RMSNorm", "LlamaRMSNorm", "MistralRMSNorm")
ZERO_CENTRED = ("Qwen3_5RMSNorm", "Qwen3_5MoeRMSNorm", "Qwen3NextRMSNorm")     # x_normed * (1 + weight)
GATED = ("Qwen3_5RMSNormGated", "Qwen3_5MoeRMSNormGated", "Qwen3NextRMSNormGated")  # weight * x_normed * silu(z)
# 1 + weight per zero-centred norm, kept as long as the module lives: a captured graph reads it at every replay
_SCALES: "weakref.WeakKeyDictionary[torch.nn.Module, torch.Tensor]" = weakref.WeakKeyDictionary()
GROUPED = "grouped_sdpa"        # the attention implementation name registered with transformers


# Attention with a mask and fewer K/V heads than query heads: transformers' SDPA path repeats K/V to every query head
# (a copy of the whole cache per layer and step) whenever a mask is given and there is more than one query: 93 us per
# layer at Qwen3-8B widths for a 65-node verify over 2048 rows; stacked (`grouped_attention`, no copy) 58 us (in CUDA
# graphs, one H200, 2026-11-29, `python3 bench/bench_kernels.py --preset qwen3-8b --caps 2048 --queries 1,16,65`).
# On CUDA the target's masked attention is one Triton kernel instead where measured (remote.kernels.attention, head
# sizes up to 64: no copies at all, 10.8 us a layer for a 33-node verify of the demo target against ~15 through
# cuDNN; one H200, 2026-11-30, `python3 bench/bench_methods.py $Q3 --temperatures 0 --num-prompts 6
# --max-new-tokens 128 --budgets 32,64 --ar-again --stock-generate`, its phase split); the stacking stays for CPUs,
# larger heads and the drafter's eager (growing) cache.
def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                      scale: float | None, stacked: bool = False) -> torch.Tensor:
    """SDPA with fewer K/V heads than query heads, without repeating K/V: the query heads that share a K/V head
    are stacked along the query axis, and a per-query mask with them. q [1, Hq, Q, D], k / v [1, Hkv, K, D],
    mask None, or bool / additive [Q or 1, K] (`stacked`: already [groups * Q or 1, K]) -> [1, Hq, Q, D]."""
    _, heads, q_len, dim = q.shape
    groups = heads // k.shape[1]
    if mask is not None and mask.shape[0] > 1 and not stacked:
        mask = mask.repeat(groups, 1)                                  # row g * Q + i: query i of group member g
    out = F.scaled_dot_product_attention(q.reshape(1, k.shape[1], groups * q_len, dim), k, v, attn_mask=mask,
                                         scale=scale)
    return out.reshape(1, heads, q_len, dim)     # a copy only where the backend's output is strided (eager fp32)


def _grouped_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' attention-function signature; batch 1 with a mask shared by the heads ([1, 1, Q, K])."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_mask is not None and query.shape[0] == 1 and attention_kernel.available(query):
        scale = query.shape[-1] ** -0.5 if scaling is None else scaling
        return attention_kernel.attention(query, key, value, attention_mask[0, 0], scale), None   # [1, Q, Hq, D]
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


# RMSNorm: transformers' Qwen3 / Llama-style norm is six kernels per call (cast, pow, mean, add, rsqrt, two
# multiplies), 11-22 us; `F.rms_norm` is one fused kernel, 2-5 us (demo-qwen3 and Qwen3-8B widths, in CUDA graphs,
# one H200, 2026-11-29, `python3 bench/bench_kernels.py --preset demo-qwen3 --caps 1024,2048` and `--preset
# qwen3-8b --caps 2048 --queries 1,16,65`). A step calls it four times per layer. The
# zero-centred norm of Qwen3.5 / Qwen3-Next (`1 + weight`, in float32) is nine; fused it is three (cast, `F.rms_norm`
# with the float32 scale `1 + weight`, made once per module, and the cast back), and their gated norm (GDN output)
# goes from twelve to eight. The hybrid demo target's 27 norms a step were ~480 us of its 1.0 ms verify; fused, its
# verify went from 554 to 383 launches (1.09 to 0.84 ms) and an AR step from 0.85 to 0.63 ms (one H200, 2026-11-29,
# `python3 bench/bench_methods.py $Q35 --temperatures 0 --num-prompts 24 --max-new-tokens 128 --budgets 32,64
# --ar-again --phase-kernels`).
def _fused_norm(self, hidden_states: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(hidden_states, (hidden_states.shape[-1],), self.weight, self.variance_epsilon)


def _fused_zero_centred_norm(self, x: torch.Tensor) -> torch.Tensor:
    return active(zero_centred_norm)(x, _SCALES[self], self.eps)


def _fused_gated_norm(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    return active(gated_norm)(x, gate, self.weight, self.variance_epsilon)


def _gathered_embedding(self, input_ids: torch.Tensor) -> torch.Tensor:
    """`nn.Embedding.forward` with a step's few rows in one `gather_rows` launch (PyTorch's small-index select took
    5.8 us for a verify's 32 rows of the demo target: one H200, 2026-12-04, `python3 bench/bench_methods.py $Q3
    --temperatures 0 --num-prompts 4 --budgets 31 --phase-kernels`)."""
    if input_ids.numel() > MAX_ROWS:
        return torch.nn.Embedding.forward(self, input_ids)
    width = self.weight.shape[1]
    out = self.weight.new_empty(*input_ids.shape, width)
    gather_rows(self.weight, 0, input_ids.reshape(-1), out.view(-1, width), 0)
    return out


def _fused(norm: torch.nn.Module | None, forward) -> bool:
    """Whether `norm`'s forward is `forward` (`step_kernels` patched it)."""
    return getattr(getattr(norm, "forward", None), "__func__", None) is forward


def residual_norm(norm: torch.nn.Module, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + h, norm(x + h)) for a layer loop of our own (remote.models.layer_loop): inside `step_kernels` the add and
    the norm as one function (one kernel when compiled)."""
    if _fused(norm, _fused_zero_centred_norm):
        return active(add_zero_centred_norm)(x, h, _SCALES[norm], norm.eps)
    if _fused(norm, _fused_norm):
        return active(add_rms_norm)(x, h, norm.weight, norm.variance_epsilon)
    s = x + h
    return s, norm(s)


def qkv_rotary(attn: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rope, rotate):
    """An attention's queries, keys and values [1, T, H, D], q and k normed per head (Qwen3's q_norm / k_norm, where
    it has them) and rotated by `rotate` (the modeling module's `apply_rotary_pos_emb`) -> q [1, Hq, T, D]
    contiguous (stacking the heads that share a K/V head is then a view) and K/V stacked [2, Hkv, T, D] (one cache
    write): inside `step_kernels` one function (one kernel each for q and K/V when compiled); elsewhere the
    modules' own forwards."""
    q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
    fused = _fused(q_norm, _fused_norm) and _fused(k_norm, _fused_norm)
    if fused and q_norm.variance_epsilon == k_norm.variance_epsilon:
        return active(norm_rotary)(q, k, v, q_norm.weight, k_norm.weight, q_norm.variance_epsilon, *rope,
                                   plain(rotate))
    if q_norm is not None:
        q, k = q_norm(q), k_norm(k)
    q, k = rotate(q.transpose(1, 2), k.transpose(1, 2), *rope)
    return q.contiguous(), torch.stack([k[0], v[0].transpose(0, 1)])


def step_mask(visible: torch.Tensor, dtype: torch.dtype, head_dim: int, groups: int) -> torch.Tensor:
    """The mask `attend` reads, made once a step for every layer from `visible` [T or 1, K] bool: itself where the
    attention kernel serves; else additive (dtype's min where hidden) and, for several queries, repeated for the
    `groups` query heads stacked on each K/V head. Made per layer, SDPA's conversion of a bool mask and the
    stacking's repeat were four kernels a layer (Qwen3-8B widths: one H200, 2026-12-03, `gpu_suite.sh
    q8b_kernels`)."""
    if attention_kernel.serves(visible.device, head_dim):
        return visible
    mask = additive_mask(visible, dtype)
    return mask.repeat(groups, 1) if mask.shape[0] > 1 else mask


def additive_mask(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An additive attention mask of `visible`'s shape from it (True = may attend): 0 there, dtype's min elsewhere."""
    mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    return mask.masked_fill_(~visible, torch.finfo(dtype).min)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """A step's queries q [1, Hq, T, D] over a static cache k / v [1, Hkv, K, D] with `mask` from `step_mask` ->
    [1, T, Hq, D]: the attention kernel where it serves (remote.kernels.attention), else `grouped_attention`."""
    if attention_kernel.available(q):
        return attention_kernel.attention(q, k, v, mask, scale)
    return grouped_attention(q, k, v, mask, scale, stacked=True).transpose(1, 2)


def _patch(norm: torch.nn.Module) -> None:
    kind = type(norm).__name__
    if kind in ZERO_CENTRED and norm not in _SCALES:
        # a plain tensor, made once: captured graphs and later runs read it (weights do not change while decoding)
        with torch.inference_mode(False), torch.no_grad():
            _SCALES[norm] = 1.0 + norm.weight.float()
    forward = _fused_norm if kind in FUSABLE else _fused_gated_norm if kind in GATED else _fused_zero_centred_norm
    norm.forward = types.MethodType(forward, norm)


@contextlib.contextmanager
def step_kernels(model: torch.nn.Module, drafter: torch.nn.Module | None = None, compiled: bool = False):
    """Yields the number of norms replaced. `compiled`: the target's elementwise glue compiled too
    (remote.kernels.glue)."""
    norms = [m for root in (model, drafter) if root is not None for m in root.modules()
             if type(m).__name__ in FUSABLE + ZERO_CENTRED + GATED and getattr(m, "activation", "silu") == "silu"]
    for norm in norms:
        _patch(norm)
    embeddings = [m for m in (model.get_input_embeddings(),) if type(m) is torch.nn.Embedding and m.max_norm is None]
    for table in embeddings:
        table.forward = types.MethodType(_gathered_embedding, table)
    config = model.config
    swap = getattr(config, "_attn_implementation", None) == "sdpa" and _register()
    if swap:
        config._attn_implementation = GROUPED
    try:
        with grouped(model), compiled_glue(model) if compiled else contextlib.nullcontext():
            yield len(norms)
    finally:
        for module in norms + embeddings:
            del module.forward                   # back to the class's own forward
        if swap:
            config._attn_implementation = "sdpa"
