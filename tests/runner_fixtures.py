"""Tiny real transformers models and drafters for the runner tests (tests/test_runner_*.py).

Shapes are small on purpose: a tiny vocabulary lets a random drafter's tree catch the target's tokens, so
multi-token acceptance (and the KV compaction it needs) happens often in a few hundred milliseconds.
"""
from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from conf import random_fields
from remote.models.backends import build_target
from remote.models.drafter_io import random_drafter

# name -> transformers config fields (qwen3). Two shapes: different width, depth, heads, GQA ratio, vocab.
# Pass initializer_range=0.3 for peaked distributions (the drafter's too, through the target's LM head): deep trees.
SHAPES = {
    "narrow": dict(vocab_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=16),
    "wide": dict(vocab_size=16, hidden_size=48, intermediate_size=96, num_hidden_layers=3,
                 num_attention_heads=3, num_key_value_heads=3, head_dim=16),
}


def tiny_model(shape: str = "narrow", seed: int = 0, **overrides) -> torch.nn.Module:
    fields = {**SHAPES[shape], "model_type": "qwen3", "max_position_embeddings": 512,
              "tie_word_embeddings": False, **overrides}
    config = AutoConfig.for_model(**fields)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa").eval()


def tiny_drafter(model, block_size: int = 8, seed: int = 1, layers: int = 1):
    """A random drafter for `model`; the last vocabulary id doubles as its mask token (no tokenizer needed)."""
    mask = model.config.vocab_size - 1
    return random_drafter(model, None, {"num_hidden_layers": layers, "dflash_config": {"mask_token_id": mask}},
                          block_size, seed)


def tiny_pair(shape: str = "narrow", block_size: int = 8, seed: int = 0):
    model = tiny_model(shape, seed)
    drafter = tiny_drafter(model, block_size, seed + 1)
    return model, drafter, build_target(model, drafter.target_layer_ids)


def prompts(model, count: int, length: int = 6, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size - 1          # never the mask id
    return [torch.randint(0, vocab, (1, length + (i % 3)), generator=g) for i in range(count)]



TINY_QWEN3 = random_fields("tiny-qwen3")          # conf/model/tiny-qwen3.yaml (vocab fits the shipped tokenizer)


def tiny_spec(method: str = "ddtree", **parts):
    """A RunSpec for the tiny random Qwen3 pair; `parts` override fields per section, e.g. decoding={...}."""
    from remote.spec import DatasetSpec, DecodingSpec, DrafterSpec, ModelSpec, RunSpec
    model = ModelSpec(**{"random": dict(TINY_QWEN3), **parts.get("model", {})})
    drafter = DrafterSpec(**{"random": {"num_hidden_layers": 1}, "block_size": 6, **parts.get("drafter", {})})
    decoding = DecodingSpec(**{"method": method, "tree_budget": 16, "max_new_tokens": 12, "warmup": 0,
                               **parts.get("decoding", {})})
    dataset = DatasetSpec(**{"num_prompts": 3, **parts.get("dataset", {})})
    return RunSpec(run_id="test", model=model, drafter=drafter, decoding=decoding, dataset=dataset,
                   **{"device": "cpu", **parts.get("top", {})})
