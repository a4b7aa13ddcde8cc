"""A decoder's layers run by a loop of our own: embed, every layer's norm / token mixer / norm / MLP, final norm.

Contract: `run_layers(decoder, layers, input_ids, positions, mix, feature_ids)` with `decoder` a transformers
text model (embed_tokens, layers, norm, rotary_emb) returns (the final-normed hidden states [T, H], taps): the
outputs [T, H] of decoder layers `feature_ids` (0-based; HF's `hidden_states[i + 1]`, for the last layer the
final-norm output, as in HF) on `features_device`, one a layer (`Verified.taps`: the drafter's features once
concatenated). `mix(i, layer, h, rope)` is layer i's token mixer (attention or recurrence) on its normed input h
[1, T, H], with `rope` the (cos, sin) of `positions` on h's device. `on(device)` is entered around each layer's work
(a target split over GPUs makes the layer's device current there). `mrope`: the rotary takes [3, 1, T] positions
(Qwen3.5's multimodal rotary; text positions are the same in all three).
"""
from __future__ import annotations

import contextlib

import torch

from ..kernels.step import residual_norm


# Why not the model's own forward: our targets need what it cannot give. A hybrid's recurrent layers must run a tree
# from each node's parent state (remote.models.hybrid_target); a pure-attention target's captured steps
# (remote.models.attention_loop) write a static cache at device-side rows and attend with a per-step mask. And in
# both, each residual add goes with the norm after it (`residual_norm`: one kernel in captured steps, where
# transformers' layers add and norm apart: two kernels, twice a layer).
def run_layers(decoder, layers: int, input_ids: torch.Tensor, positions: torch.Tensor, mix, feature_ids: list[int],
               features_device: torch.device, on=lambda device: contextlib.nullcontext(), mrope: bool = False):
    x = decoder.embed_tokens(input_ids)                                               # [1, T, H]
    pos = positions.reshape(1, -1).to(x.device)
    rope = decoder.rotary_emb(x, pos.expand(3, 1, -1) if mrope else pos)             # cos, sin [1, T, rotary_dim]
    # A layer's MLP output (`late`) is added at the next layer's input norm, where layer i's hidden state is known.
    feats: dict[int, torch.Tensor] = {}
    late = None
    for i, layer in enumerate(decoder.layers[:layers]):
        dev = layer.input_layernorm.weight.device
        x = x.to(dev)
        with on(dev):
            if late is None:
                h = layer.input_layernorm(x)
            else:
                x, h = residual_norm(layer.input_layernorm, x, late.to(dev))
                feats[i - 1] = x
            h = mix(i, layer, h, tuple(r.to(dev) for r in rope))
            x, h = residual_norm(layer.post_attention_layernorm, x, h)
            h = layer.mlp(h)
            late = h[0] if isinstance(h, tuple) else h                                # MoE blocks may return a tuple
    dev = decoder.norm.weight.device
    with on(dev):
        _, x = residual_norm(decoder.norm, x.to(dev), late.to(dev))
    feats[layers - 1] = x                                                             # HF ties the last hidden state
    return x[0], tuple(feats[i][0].to(features_device) for i in feature_ids)
