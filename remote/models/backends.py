"""Pick the `Target` implementation for a model.

Contract: `build_target(model, target_layer_ids)` returns a `Target` (remote.models.target) for `model`. Hybrid models
whose config `layer_types` contains "linear_attention" (Qwen3.5 / Qwen3.6 / Qwen3-Next) get
`remote.models.hybrid_target.HybridTarget` (per-node recurrent state); every other model gets the pure-attention
`AttentionTarget`. The decoding methods only ever talk to the returned object.
"""
from __future__ import annotations

import torch

from .attention_target import AttentionTarget
from .target import Target


def is_hybrid(model: torch.nn.Module) -> bool:
    layer_types = getattr(model.config.get_text_config(), "layer_types", None) or []
    return "linear_attention" in layer_types


def build_target(model: torch.nn.Module, target_layer_ids: list[int] | None) -> Target:
    if is_hybrid(model):
        from .hybrid_target import HybridTarget   # written separately; imported only when needed
        return HybridTarget(model, target_layer_ids)
    return AttentionTarget(model, target_layer_ids)
