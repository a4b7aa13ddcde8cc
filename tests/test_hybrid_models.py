"""Tiny random hybrid (attention + Gated DeltaNet) models for the hybrid-target tests, the oracle they are checked
against, and the facts about these models that make `remote.models.hybrid_target` necessary.

The oracle is the model's own forward over a whole sequence with a cache built from its config
(`DynamicCache(config=...)`): what a node's logits must equal is this forward over prefix + ancestor path.
Facts pinned here (each test fails if transformers ever changes them, so the reasoning gets revisited):
a bare `DynamicCache()` crashes these models, and the reference recipe for tree verification (the model's own
forward over the flattened tree with a 4-D ancestor mask) gives wrong logits to nodes whose list-order
predecessors are not their ancestors, while `HybridTarget` gives the right ones.
"""
from __future__ import annotations

import functools
import inspect
import json
import random
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

from remote.kernels.gdn_paths import torch_gdn_path

ASSETS = Path(__file__).resolve().parent.parent / "remote" / "assets"
VOCAB = 1024

# Two shapes of qwen3_5_text (linear:full 3:1 and 1:1, different widths, GQA / no GQA in the GDN heads, conv kernel
# 4 / 3, partial rotary 1/4 / 1/2 with an explicit mrope split), the multimodal Qwen3.5 model, qwen3_next (MoE MLP)
# and qwen3_5_moe_text.
_TEXT_3TO1 = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
    linear_value_head_dim=16, layer_types=["linear_attention"] * 3 + ["full_attention"],
)
SHAPES = {
    "qwen3_5-3to1": dict(model_type="qwen3_5_text", **_TEXT_3TO1),
    "qwen3_5-1to1": dict(
        model_type="qwen3_5_text", vocab_size=VOCAB, hidden_size=96, intermediate_size=160, num_hidden_layers=4,
        num_attention_heads=6, num_key_value_heads=3, head_dim=32, linear_num_key_heads=3, linear_num_value_heads=3,
        linear_key_head_dim=24, linear_value_head_dim=32, linear_conv_kernel_dim=3,
        layer_types=["linear_attention", "full_attention"] * 2,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                             mrope_section=[4, 2, 2], mrope_interleaved=True),
    ),
    "qwen3_5-vl": dict(model_type="qwen3_5", text_config=_TEXT_3TO1,
                       vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                                          out_hidden_size=64)),
    "qwen3_next": dict(
        model_type="qwen3_next", vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=32,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
    ),
    # narrow enough for Triton's interpreter (tests/test_gdn_tree_kernel.py): one value block a head, Dk 12 (masked
    # lanes), two value heads per key head
    "qwen3_5-narrow": dict(
        model_type="qwen3_5_text", vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=1, linear_num_value_heads=2,
        linear_key_head_dim=12, linear_value_head_dim=8, layer_types=["linear_attention", "full_attention"],
    ),
    "qwen3_5_moe": dict(
        model_type="qwen3_5_moe_text", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, layer_types=["linear_attention"] * 3 + ["full_attention"],
    ),
}


@functools.lru_cache(maxsize=None)
def tiny_model(name: str, seed: int = 0) -> torch.nn.Module:
    """A random fp32 model of SHAPES[name], eval mode, cached per process (tests never mutate weights)."""
    fields = dict(SHAPES[name])
    model_type = fields.pop("model_type")
    torch.manual_seed(seed)
    config = AutoConfig.for_model(model_type, **fields)
    config.initializer_range = 0.1     # larger than the default 0.02 so that a wrong state moves logits clearly
    if model_type == "qwen3_5":
        from transformers import Qwen3_5ForConditionalGeneration
        model = Qwen3_5ForConditionalGeneration(config)
    else:
        model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # the zero-centred RMSNorm weights start at 0 (scale 1): give them something to do
        for name_, param in model.named_parameters():
            if name_.endswith("norm.weight"):
                param.add_(0.2 * torch.randn_like(param))
    return model.float().eval()


def layer_types(model: torch.nn.Module) -> list[str]:
    return list(model.config.get_text_config().layer_types)


def cache_kwarg(model: torch.nn.Module) -> str:
    """`cache` from transformers 5.24, `past_key_values` before (5.24 still takes it, with a FutureWarning)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.inference_mode()
def plain_forward(model: torch.nn.Module, ids: list[int] | torch.Tensor):
    """The oracle: the model's own forward over the whole sequence with a cache built from its config.
    Returns (output, cache); output.logits [1, T, V], output.hidden_states per layer."""
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)
    cache = DynamicCache(config=model.config)
    with torch_gdn_path():   # the oracle is the torch math, also where fla is installed
        out = model(input_ids=ids, use_cache=True, output_hidden_states=True, **{cache_kwarg(model): cache})
    return out, cache


@torch.inference_mode()
def plain_last_batch(model: torch.nn.Module, sequences: list[list[int]]):
    """The oracle for many sequences in one forward, for speed: rows are right-padded, and in a causal model
    (attention and recurrence alike) a position never depends on later ones, so each row's last real position is
    exactly the plain forward of that sequence. Returns (logits [B, V], hidden_states: tuple of [B, H]) there."""
    length = max(len(s) for s in sequences)
    ids = torch.zeros(len(sequences), length, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
    with torch_gdn_path():
        out = model(input_ids=ids, use_cache=True, output_hidden_states=True,
                    **{cache_kwarg(model): DynamicCache(config=model.config)})
    rows, last = torch.arange(len(sequences)), torch.tensor([len(s) - 1 for s in sequences])
    return out.logits[rows, last], tuple(h[rows, last] for h in out.hidden_states)


def cache_state(cache, layer: int, kind: str) -> dict[str, torch.Tensor]:
    """One layer of a transformers cache in the layout `HybridTarget.layer_state` uses."""
    lay = cache.layers[layer]
    if kind == "linear_attention":
        return {"conv": lay.conv_states[0], "recurrent": lay.recurrent_states[0]}
    return {"keys": lay.keys, "values": lay.values}


@functools.lru_cache(maxsize=1)
def real_token_ids() -> list[list[int]]:
    """The shipped prompts, tokenized with the shipped tokenizer (ids < 1000 < VOCAB)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(ASSETS / "tokenizer" / "tokenizer.json"))
    lines = (ASSETS / "prompts.jsonl").read_text().splitlines()
    return [tok.encode(json.loads(line)["prompt"]).ids for line in lines if line.strip()]


def random_tree(rng: random.Random, n: int, reach: int, roots: int = 1) -> list[int]:
    """Random parents (Target convention, parents[i] < i, -1 = on the prefix). Small `reach` gives deep, thin trees,
    large `reach` bushy ones; `roots` > 1 makes a forest hanging off the prefix."""
    parents = []
    for i in range(n):
        if i < roots:
            parents.append(-1)
        else:
            parents.append(rng.randint(max(0, i - reach), i - 1))
    return parents


def ancestor_path(parents: list[int], node: int) -> list[int]:
    """Root-first chain of node indices ending at `node`."""
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


# ---- facts --------------------------------------------------------------------------------------------------------

def test_bare_dynamic_cache_crashes_hybrid_models():
    """Why caches must come from the config: the crash text differs per version (IndexError from 5.13 on)."""
    model = tiny_model("qwen3_5-3to1")
    with pytest.raises((IndexError, AttributeError, ValueError)):
        model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True, **{cache_kwarg(model): DynamicCache()})


@pytest.mark.parametrize("name", ["qwen3_5-3to1", "qwen3_5-1to1"])
def test_flattened_tree_verification_is_wrong_and_hybrid_target_is_right(name):
    """The reference recipe: the model's own forward over the flattened tree, 4-D ancestor mask, positions
    prefix + depth, cache from DynamicCache(config=...). Attention honours the mask, the GDN recurrence cannot, so
    any node whose list-order predecessors are not exactly its ancestors gets wrong logits."""
    from remote.models.hybrid_target import HybridTarget

    model = tiny_model(name)
    prompt = real_token_ids()[0][:12]
    parents = [-1, 0, 0, 1, 2, 2, 3, 5]        # node 2 follows its sibling 1, node 5 follows 3 and 4, ...
    tokens = real_token_ids()[1][:len(parents)]
    depth = [0] * len(parents)
    for i, p in enumerate(parents):
        depth[i] = 0 if p < 0 else depth[p] + 1

    out, cache = plain_forward(model, prompt)
    n, p = len(parents), len(prompt)
    visible = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        visible[i, ancestor_path(parents, i)] = True
    mask = torch.zeros(1, 1, n, p + n)
    mask[0, 0, :, p:].masked_fill_(~visible, torch.finfo(torch.float32).min)
    with torch.inference_mode(), torch_gdn_path():
        flat = model(input_ids=torch.tensor([tokens]), position_ids=torch.tensor([[p + d for d in depth]]),
                     attention_mask=mask, use_cache=True, **{cache_kwarg(model): cache}).logits[0]

    target = HybridTarget(model, [0])
    target.prefill(torch.tensor([prompt]))
    ours = target.verify(torch.tensor(tokens), parents).logits
    flat_err, our_err = [], []
    for i in range(n):
        want = plain_forward(model, prompt + [tokens[j] for j in ancestor_path(parents, i)])[0].logits[0, -1]
        flat_err.append((flat[i] - want).abs().max().item())
        our_err.append((ours[i] - want).abs().max().item())
    # nodes 0 and 1 are preceded by exactly their ancestors: there the flattened forward is right
    assert max(flat_err[:2]) <= 1e-4, flat_err
    assert min(flat_err[2:]) > 1e-3, flat_err        # every other node is wrong, by far more than the tolerance
    assert max(our_err) <= 1e-4, our_err

