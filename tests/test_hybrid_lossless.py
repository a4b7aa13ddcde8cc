"""Acceptance on hybrid targets: at temperature 0 in float32, `dflash` and `ddtree` (budgets 1, 8, 64, 256) through
`HybridTarget` emit exactly AR's tokens (the model's own KV/recurrent-cached `generate_ar`), 20 prompts x 64 new
tokens, on two shapes of tiny random Qwen3.5 targets (linear:full 3:1 and 1:1).

The vocabularies are tiny and the weights large on purpose (as in tests/runner_fixtures.py): a random drafter's
tree then catches the target's tokens often, so multi-token acceptance, and with it the install of a mid-tree
node's recurrent/conv state and the compaction of attention K/V, happens in most steps; the test checks that it did.
"""
from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from remote.models.backends import build_target
from remote.decoding.loop import generate_ar, generate_spec
from remote.models.drafter_io import random_drafter
from remote.models.hybrid_target import HybridTarget
from remote.timing import PhaseTimer

LIN, FULL = "linear_attention", "full_attention"
SHAPES = {
    "3to1": dict(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=16, linear_num_key_heads=1, linear_num_value_heads=2,
                 linear_key_head_dim=16, linear_value_head_dim=16, layer_types=[LIN, LIN, LIN, FULL],
                 initializer_range=0.3),
    "1to1": dict(vocab_size=12, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=3,
                 num_key_value_heads=3, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=2,
                 linear_key_head_dim=16, linear_value_head_dim=24, linear_conv_kernel_dim=3, layer_types=[LIN, FULL],
                 initializer_range=0.3),
}
METHODS = [("dflash", 0)] + [("ddtree", b) for b in (1, 8, 64, 256)]


def tiny_hybrid_pair(shape: str, seed: int = 0):
    config = AutoConfig.for_model("qwen3_5_text", max_position_embeddings=512, tie_word_embeddings=False,
                                  **SHAPES[shape])
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    mask = config.vocab_size - 1                  # the last id doubles as the drafter's mask token
    drafter = random_drafter(model, None, {"num_hidden_layers": 1, "dflash_config": {"mask_token_id": mask}}, 8,
                             seed + 1)
    return model, drafter, build_target(model, drafter.target_layer_ids)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_hybrid_greedy_outputs_equal_ar(shape):
    model, drafter, target = tiny_hybrid_pair(shape)
    assert isinstance(target, HybridTarget)
    timer = PhaseTimer(torch.device("cpu"))
    g = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size - 1           # prompts never hold the mask id
    mismatches, deepest, steps = [], {m: 0 for m in METHODS}, {m: 0 for m in METHODS}
    for i in range(20):
        ids = torch.randint(0, vocab, (1, 3 + i % 5), generator=g)   # some prompts shorter than the conv kernel
        ar = generate_ar(model, ids, 64, 0.0, None, set(), timer).tokens
        assert len(ar) == 64
        for method, budget in METHODS:
            gen = generate_spec(target, drafter, model, ids, 64, 0.0, None, set(), timer, method, budget)
            if gen.tokens != ar:
                first = next(j for j, (a, b) in enumerate(zip(gen.tokens + [-1] * 64, ar)) if a != b)
                mismatches.append((i, method, budget, first))
            deepest[(method, budget)] = max(deepest[(method, budget)], max(gen.accepted))
            steps[(method, budget)] += len(gen.accepted)
    print(f"\n{shape}: deepest accepted path {deepest}; verify steps {steps}")
    assert not mismatches, f"(prompt, method, budget, first divergence): {mismatches}"
    # Meaningful only if deep acceptance (mid-tree state install, K/V compaction) happened.
    assert deepest[("dflash", 0)] >= 1 and deepest[("ddtree", 256)] >= 3
    assert steps[("ddtree", 256)] < 20 * 48
