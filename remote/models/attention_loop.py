"""A pure-attention target's captured steps through a layer loop of our own (remote.models.layer_loop) on a static
cache, in place of transformers' forward.

Contract: `AttentionLoop.unsupported(model)` is None where the loop can run `model` (a model type of MODEL_TYPES;
decoder layers with input_layernorm, self_attn with q/k/v/o projections, post_attention_layernorm and mlp; a text
decoder with embed_tokens, layers, norm and rotary_emb), else why not; other models keep transformers' forward.
`AttentionLoop(model, target_layer_ids).forward(ids, positions, kv, visible, featured)` runs ids [1, T] at positions
[T] on `kv` (a `StaticKV` whose `slots` the caller set: the rows the T tokens' K/V go to) with `visible` [T or 1,
capacity] bool (the rows each token sees, itself included) and returns logits [T, V] float32 and, with `featured`,
the drafter features of `target_layer_ids`: what transformers' forward returns for the same cache rows and mask, up
to rounding (tests compare the two). Non-goals: sliding-window layers (graph_support refuses them), a target split
over devices.
"""
from __future__ import annotations

import sys

import torch

from ..kernels.step import attend, qkv_rotary, step_mask
from .layer_loop import run_layers
from .static_cache import StaticKV
from .target import Verified

# Models whose decoder layer is exactly norm -> attention -> add -> norm -> MLP -> add: a layer of the same parts can
# still compute otherwise (Granite scales its residuals, Gemma 2 norms after each block), so the type is checked too.
MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe")
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
LAYER = ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")
DECODER = ("embed_tokens", "layers", "norm", "rotary_emb")


def _text_decoder(model: torch.nn.Module):
    inner = getattr(model, "model", None)
    return getattr(inner, "language_model", inner)


# Why: at Qwen3-8B widths the GEMMs of an AR step read their weights at ~4 TB/s, and what kept the step at 1.46x the
# weights' floor was the ~13 small kernels a layer between them (one H200, 2026-12-01, `gpu_suite.sh q8b`).
# transformers' layer adds each residual and norms apart (two kernels, twice a layer), norms q and k and rotates them
# in three, writes K and V in two, and its SDPA path turns the bool mask into an additive one in every layer (four
# kernels). Here each residual add goes with the next norm and q / k norms with the rotary and the K/V stacking
# (`remote.kernels.step.residual_norm` / `qkv_rotary`: compiled kernels inside `step_kernels` with the compiled glue),
# K/V go to the cache in one write, and the mask is made once a step for every layer (`step_mask`). An AR step at
# Qwen3-8B widths went 1.44-1.46x -> 1.38-1.40x the floor with the loop, 1.33-1.35x with the one mask and K/V write
# (674 -> 569 launches); demo-qwen3's AR 0.28 -> 0.24 ms a token (one H200, 2026-12-03, `gpu_suite.sh q8b
# q8b_kernels q3_auto`).
class AttentionLoop:
    def __init__(self, model: torch.nn.Module, target_layer_ids: list[int] | None):
        self.decoder, self.lm_head = _text_decoder(model), model.lm_head
        self.layers = len(self.decoder.layers)
        self.target_layer_ids = list(target_layer_ids or [])
        self._modeling = sys.modules[type(self.decoder).__module__]     # its apply_rotary_pos_emb, looked up per call
        attn = self.decoder.layers[0].self_attn
        self.head_dim = attn.head_dim
        self.groups = attn.q_proj.out_features // attn.k_proj.out_features      # query heads per K/V head

    @staticmethod
    def unsupported(model: torch.nn.Module) -> str | None:
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        if model_type not in MODEL_TYPES:
            return f"model type {model_type!r} is not one the loop was written for ({', '.join(MODEL_TYPES)})"
        decoder = _text_decoder(model)
        if decoder is None or not all(hasattr(decoder, n) for n in DECODER) or not hasattr(model, "lm_head"):
            return f"{type(model).__name__} is not a decoder with {', '.join(DECODER)} and lm_head"
        for i, layer in enumerate(decoder.layers):
            attn = getattr(layer, "self_attn", None)
            if not all(hasattr(layer, n) for n in LAYER) or not all(hasattr(attn, n) for n in ATTENTION):
                return f"decoder layer {i} ({type(layer).__name__}) is not norm / q,k,v,o attention / norm / MLP"
        return None

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, kv: StaticKV, visible: torch.Tensor,
                featured: bool = False) -> Verified:
        mask = step_mask(visible, self.lm_head.weight.dtype, self.head_dim, self.groups)

        def mix(i: int, layer, h: torch.Tensor, rope) -> torch.Tensor:
            return self._attention(i, layer.self_attn, h, rope, kv, mask)

        hidden, taps = run_layers(self.decoder, self.layers, ids, positions, mix,
                                  self.target_layer_ids if featured else [], self.lm_head.weight.device)
        return Verified(self.lm_head(hidden).float(), taps)

    def _attention(self, i: int, attn: torch.nn.Module, h: torch.Tensor, rope, kv: StaticKV,
                   mask: torch.Tensor) -> torch.Tensor:
        t, d = h.shape[1], attn.head_dim
        q, k, v = (proj(h).view(1, t, -1, d) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
        q, stacked = qkv_rotary(attn, q, k, v, rope, self._modeling.apply_rotary_pos_emb)   # q [1, Hq, T, D]
        keys, values = kv.write(i, stacked)
        o = attend(q, keys, values, mask, attn.scaling)                                     # [1, T, Hq, D]
        return attn.o_proj(o.reshape(1, t, -1))
