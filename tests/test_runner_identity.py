"""Acceptance: at temperature 0 in float32, `dflash` and `ddtree` (budgets 1, 4, 16, 64, 256) emit exactly AR's
tokens, 20 prompts x 64 new tokens, on two shapes of tiny random Qwen3 targets."""
from __future__ import annotations

import pytest
import torch

from remote.decoding.loop import generate_ar, generate_spec
from remote.timing import PhaseTimer
from tests.runner_fixtures import prompts, tiny_pair

BUDGETS = (1, 4, 16, 64, 256)
METHODS = [("dflash", 0)] + [("ddtree", b) for b in BUDGETS]


@pytest.mark.parametrize("shape", ["narrow", "wide"])
def test_greedy_outputs_equal_ar(shape):
    model, drafter, target = tiny_pair(shape, block_size=8)
    timer = PhaseTimer(torch.device("cpu"))
    mismatches, deepest, steps = [], {m: 0 for m in METHODS}, {m: 0 for m in METHODS}
    for i, ids in enumerate(prompts(model, 20, seed=1)):
        ar = generate_ar(model, ids, 64, 0.0, None, set(), timer).tokens
        assert len(ar) == 64
        for method, budget in METHODS:
            gen = generate_spec(target, drafter, model, ids, 64, 0.0, None, set(), timer, method, budget)
            if gen.tokens != ar:
                mismatches.append((i, method, budget))
            deepest[(method, budget)] = max(deepest[(method, budget)], max(gen.accepted))
            steps[(method, budget)] += len(gen.accepted)
    print(f"\n{shape}: deepest accepted path {deepest}; verify steps {steps}")
    assert not mismatches
    # The check means something only if multi-token acceptance (and so KV compaction) happened.
    assert deepest[("ddtree", 256)] >= 2
    assert steps[("ddtree", 256)] < 20 * 63
