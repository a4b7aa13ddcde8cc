"""Small differences between transformers versions (5.17 on the GPU hosts, 5.25 here), in one place.

Contract: `cache_kwarg(model)` is the name of the forward keyword that takes a cache (`cache` from 5.24,
`past_key_values` before); `make_cache(model)` builds a cache from the model config (never a bare
`DynamicCache()`, which breaks hybrid models); `attention_layers(cache)` yields the per-layer objects whose
`keys` / `values` tensors [B, H_kv, S, D] hold the attention KV.
"""
from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache


def cache_kwarg(model: torch.nn.Module) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def make_cache(model: torch.nn.Module) -> DynamicCache:
    return DynamicCache(config=model.config)


def attention_layers(cache: DynamicCache) -> list:
    return list(cache.layers)


def input_device(model: torch.nn.Module) -> torch.device:
    return model.get_input_embeddings().weight.device


def output_device(model: torch.nn.Module) -> torch.device:
    return model.get_output_embeddings().weight.device
