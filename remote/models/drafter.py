"""The DFlash drafter: our own module, weight- and config-compatible with published DFlash checkpoints.

Contract: `DFlashDrafter(config)` takes a Qwen3-style config (as in a published `config.json`) whose
`dflash_config` (or top level) holds `target_layer_ids`, `mask_token_id` and `block_size`. It has no embedding
and no LM head: callers pass embeddings of `[last token, MASK x (block_size-1)]` made with the target's
embedding matrix and read logits with the target's LM head (`logits`), or with a head of its own over a reduced
draft vocabulary (`vocab`, remote.models.draft_vocab: `target_tokens` / `draft_tokens` map ids between the two
spaces; identities without one). Parameter names equal the
published ones (`fc`, `hidden_norm`, `norm`, `layers.N.{input_layernorm, post_attention_layernorm,
self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, mlp.{gate,up,down}_proj}`), so a published state dict loads
as is. One forward is one denoising step: block queries attend to every context position and to every block
position (bidirectional; `sliding_attention` layers are causal and windowed, as upstream). Non-goal: DFlash2
drafters (grouped convolutions, candidate selector) are refused at load.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding, rotate_half

from ..kernels.fused_linear import concatenate
from ..kernels.step import attend, grouped_attention
from .draft_vocab import DraftVocab


def dflash_value(config, name: str, default=None):
    """A DFlash field: `dflash_config[name]` first, then the config's top level, then `default`."""
    extra = getattr(config, "dflash_config", None) or {}
    return extra.get(name, getattr(config, name, default))


def spread_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """Upstream default when a checkpoint omits `target_layer_ids`: evenly from layer 1 to layer N-3."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    lo, hi = 1, num_target_layers - 3
    return [round(lo + i * (hi - lo) / (num_draft_layers - 1)) for i in range(num_draft_layers)]


# Context K/V come from `hidden_norm(fc(target features))` projected per layer; they are appended to a `DrafterCache`
# because those tokens are committed, while the block's own K/V are never stored (this is the upstream "append, then
# crop back to the committed length", without the copy). A captured step's static cache
# (remote.models.static_cache.StaticDrafterKV) writes the block's K/V into its rows after the context instead, where
# the next draft's context overwrites them: no copy of the cache a layer, and one masked attention (the Triton kernel
# on CUDA: demo-qwen3's draft 0.135-0.145 -> 0.104-0.109 ms; one H200, 2026-12-04, `python3 bench/bench_methods.py
# $Q3 --temperatures 0 --num-prompts 24 --budgets 31,63 --ar-again`, its phase split).
class DrafterCache:
    """Per-layer K/V [1, H_kv, C, D] of the committed context the drafter has seen (positions 0..C-1)."""

    visible = None          # every row a block attends over is committed context or the block itself

    def __init__(self, num_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[-2]

    def begin(self, positions: torch.Tensor, c_len: int) -> None:
        """Called before each forward with the new context's and the block's positions [C + B]; a growing cache
        needs neither."""

    def attend_rows(self, layer: int, k: torch.Tensor, v: torch.Tensor, c_len: int) -> tuple[torch.Tensor, ...]:
        """k / v [1, H_kv, C + B, D]: the new context's rows are appended to `layer`'s cache; returns the K/V the
        block attends over, the cache's rows then the block's own (not stored: those tokens are not committed)."""
        if self.keys[layer] is not None:
            self.keys[layer] = torch.cat([self.keys[layer], k[:, :, :c_len]], dim=-2)
            self.values[layer] = torch.cat([self.values[layer], v[:, :, :c_len]], dim=-2)
        else:
            self.keys[layer], self.values[layer] = k[:, :, :c_len], v[:, :, :c_len]
        return (torch.cat([self.keys[layer], k[:, :, c_len:]], dim=-2),
                torch.cat([self.values[layer], v[:, :, c_len:]], dim=-2))


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [1, H, L, D]; cos/sin [1, L, D]
    return x * cos.unsqueeze(1) + rotate_half(x) * sin.unsqueeze(1)


class DrafterAttention(nn.Module):
    def __init__(self, config, layer_idx: int):
        super().__init__()
        hidden, bias = config.hidden_size, getattr(config, "attention_bias", False)
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or hidden // self.num_heads
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        layer_types = getattr(config, "layer_types", None)
        sliding = bool(layer_types) and layer_types[layer_idx] == "sliding_attention"
        is_causal = getattr(config, "is_causal", None)
        self.is_causal = sliding if is_causal is None else bool(is_causal)
        self.window = getattr(config, "sliding_window", None) if sliding else None
        # `fuse`: q, k, v as one GEMM (buffers, so that a later `.to()` moves them too; not in the state dict)
        self.register_buffer("qkv_weight", None, persistent=False)
        self.register_buffer("qkv_bias", None, persistent=False)

    def fuse(self) -> None:
        self.qkv_weight, self.qkv_bias = concatenate([self.q_proj, self.k_proj, self.v_proj])

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x.view(1, x.shape[1], n, self.head_dim)                # [1, L, n, D]

    def _mask(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        if not self.is_causal and self.window is None:
            return None                                                # block sees everything
        diff = q_pos[:, None] - k_pos[None, :]                         # [Q, K]
        visible = torch.ones_like(diff, dtype=torch.bool)
        if self.is_causal:
            visible &= diff >= 0
        if self.window is not None:
            visible &= diff < self.window
            if not self.is_causal:
                visible &= -diff < self.window
        return visible

    def forward(self, x, ctx, cos, sin, positions, cache: DrafterCache):
        # x [1, Q, H] block; ctx [1, C, H] new context; cos/sin [1, C+Q, D]; positions [C+Q]
        q_len, c_len = x.shape[1], ctx.shape[1]
        both = torch.cat([ctx, x], dim=1)
        if self.qkv_weight is None:
            q, k, v = self.q_proj(x), self.k_proj(both), self.v_proj(both)
        else:   # the context rows' queries are computed and dropped: one GEMM costs less than three launches
            widths = [self.q_proj.out_features, self.k_proj.out_features, self.v_proj.out_features]
            q, k, v = F.linear(both, self.qkv_weight, self.qkv_bias).split(widths, dim=-1)
            q = q[:, c_len:]
        q = self.q_norm(self._heads(q, self.num_heads)).transpose(1, 2)                     # [1, Hq, Q, D]
        k = self.k_norm(self._heads(k, self.num_kv)).transpose(1, 2)                        # [1, Hkv, C+Q, D]
        v = self._heads(v, self.num_kv).transpose(1, 2)
        q = _rope(q, cos[:, c_len:], sin[:, c_len:])
        k = _rope(k, cos, sin)
        k, v = cache.attend_rows(self.layer_idx, k, v, c_len)                              # [1, Hkv, K, D]
        scale = self.head_dim ** -0.5
        if cache.visible is not None:
            # a static cache: its rows past the block are masked; the bidirectional drafters it serves
            # (graph_decode checks) need no other mask; on CUDA one Triton kernel (remote.kernels.attention)
            out = attend(q, k, v, cache.visible, scale)                                       # [1, Q, Hq, D]
            return self.o_proj(out.reshape(1, q_len, -1))
        # The cache holds every position from 0 (decode.draft checks the context is contiguous with it), so the
        # keys sit at 0 .. P+Q-1; reading positions[0] instead would cost a host sync per layer.
        k_pos = torch.arange(k.shape[2], device=x.device)
        mask = self._mask(positions[c_len:], k_pos)                    # None, or [Q, P+Q] bool
        out = grouped_attention(q, k, v, mask, scale)
        return self.o_proj(out.transpose(1, 2).reshape(1, q_len, -1))


class DrafterLayer(nn.Module):
    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.self_attn = DrafterAttention(config, layer_idx)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.register_buffer("gate_up_weight", None, persistent=False)     # `fuse`: gate and up as one GEMM

    def fuse(self) -> None:
        self.self_attn.fuse()
        self.gate_up_weight, _ = concatenate([self.mlp.gate_proj, self.mlp.up_proj])     # Qwen3MLP has no biases

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_weight is None:
            return self.mlp(x)
        gate, up = F.linear(x, self.gate_up_weight).chunk(2, dim=-1)
        return self.mlp.down_proj(self.mlp.act_fn(gate) * up)

    def forward(self, x, ctx, cos, sin, positions, cache):
        x = x + self.self_attn(self.input_layernorm(x), ctx, cos, sin, positions, cache)
        return x + self._mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        ids = dflash_value(config, "target_layer_ids")     # (a spread needs num_target_layers, which a config
        self.target_layer_ids = list(ids if ids is not None else    # that names its layers may leave out)
                                     spread_layer_ids(config.num_target_layers, config.num_hidden_layers))
        self.mask_token_id = int(dflash_value(config, "mask_token_id"))
        self.block_size = int(dflash_value(config, "block_size", 16))
        self.embed_scale = float(dflash_value(config, "input_embedding_scale", 1.0))
        self.logit_scale = float(dflash_value(config, "output_multiplier", 1.0))
        self.softcap = dflash_value(config, "final_logit_softcapping")
        hidden = config.hidden_size
        self.layers = nn.ModuleList(DrafterLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = Qwen3RMSNorm(hidden, eps=config.rms_norm_eps)
        self.fc = nn.Linear(len(self.target_layer_ids) * hidden, hidden, bias=False)
        self.hidden_norm = Qwen3RMSNorm(hidden, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        self.vocab: DraftVocab | None = None       # None: the target's LM head over its whole vocabulary

    def fuse_projections(self) -> "DFlashDrafter":
        """For decoding: each layer's q/k/v and gate/up projections run as one GEMM each (3 launches fewer per
        layer and draft; a draft is latency-bound, so a wider GEMM costs about what one of its parts did). The
        weights stay shared with the published parameters; not for training (the fused weights are detached)."""
        for layer in self.layers:
            layer.fuse()
        return self

    def new_cache(self) -> DrafterCache:
        return DrafterCache(len(self.layers))

    def forward(self, noise: torch.Tensor, features: torch.Tensor, positions: torch.Tensor,
                cache: DrafterCache) -> torch.Tensor:
        """noise [1, Q, H] block embeddings; features [1, C, F] new context; positions [C+Q] -> [1, Q, H]."""
        ctx = self.hidden_norm(self.fc(features))                      # [1, C, H]
        cos, sin = self.rotary_emb(noise, positions[None])            # [1, C+Q, D] each
        x = noise
        for layer in self.layers:
            x = layer(x, ctx, cos, sin, positions, cache)
        return self.norm(x)

    def logits(self, hidden: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """Draft logits from block hidden states with the target's LM head (+ upstream scale / softcap), or over the
        draft vocabulary with its own head: [..., V] or [..., N], in draft ids."""
        logits = (lm_head(hidden) if self.vocab is None else self.vocab.logits(hidden)) * self.logit_scale
        if self.softcap is not None and float(self.softcap) > 0:
            logits = torch.tanh(logits / float(self.softcap)) * float(self.softcap)
        return logits

    def target_tokens(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft ids (what `logits` ranks) as the target's ids."""
        return draft_ids if self.vocab is None else self.vocab.to_target(draft_ids)

    def draft_tokens(self, target_ids: torch.Tensor) -> torch.Tensor:
        """The target's ids as draft ids, -1 for a token outside the draft vocabulary."""
        return target_ids if self.vocab is None else self.vocab.to_draft(target_ids)
