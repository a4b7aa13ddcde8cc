"""The chunked GDN tree kernels (remote.kernels.gdn_chunked) on the CPU under Triton's interpreter (in a subprocess: the
interpreter is chosen when the kernel module is imported): against a step-by-step delta rule down every node's path
for random trees and chains (each node's output, and the state commit builds after each node, also in place with its
conv window), and inside `HybridTarget`, where they run the chains (and the trees, as at wide layers), against the
oracle (the model's own forward over each ancestor path) on a tiny random hybrid model in float32. Both kernels
compile for sm_90 without a GPU, and the width rule that sends trees through them is checked."""
from __future__ import annotations

import json

import pytest
import torch

from tests.interpreted import run_interpreted

pytest.importorskip("triton")

STEPWISE = r"""
import json, random, sys, torch
from remote.kernels import gdn_chunked
from remote.tree import Ancestry
from tests.gdn_reference import inputs, states_errors, stepwise

random.seed(0)
torch.manual_seed(0)
errors = []
cases, device = json.loads(sys.argv[1])
for n, (hv, dk, dv), shape in cases:
    if shape == "chain":
        parents = [-1] + list(range(n - 1))
    else:       # a random tree, some nodes on the prefix
        parents = [-1 if i == 0 or random.random() < 0.1 else random.randrange(i) for i in range(n)]
    tree = Ancestry.from_parents(parents, device)
    q, k, v, g, beta, state = inputs(n, hv, dk, dv, device)
    out, solved = gdn_chunked.tree_recurrence(q, k, v, g, beta, state, tree.visible, tree.height)
    want_out, want_states = stepwise(q, k, v, g, beta, state, parents)
    errors.append([(out - want_out).abs().max().item(),
                   *states_errors(gdn_chunked.node_state, k, solved, state, tree.visible, want_states)])
print(json.dumps(errors))
"""
CHECK = r"""
import dataclasses, json, sys
from remote.kernels import gdn_chunked
from remote.models import hybrid_target
from tests import test_hybrid_target as oracle

calls = []
def counted(name, fn):
    return lambda *args, **kwargs: calls.append(name) or fn(*args, **kwargs)

select = hybrid_target.select_gdn_kernels     # on the CPU it picks no tree kernel: hand it the interpreted ones
ran = []
for test, trees in json.loads(sys.argv[1]):
    hybrid_target.select_gdn_kernels = lambda *a, **kw: dataclasses.replace(
        select(*a, **kw), chunked=counted("chunked", gdn_chunked.tree_recurrence),
        chunked_state=counted("state", gdn_chunked.node_state), chunked_trees=trees)
    del calls[:]
    getattr(oracle, test)("qwen3_5-narrow")
    ran.append([test, calls.count("chunked"), calls.count("state")])
print(json.dumps(ran))
"""


# odd widths (masked tiles), a chain as deep as it is long, trees with nodes on the prefix, a lone node
SHAPES = [[33, [4, 12, 8], "tree"], [17, [2, 16, 24], "chain"], [70, [3, 64, 64], "tree"], [1, [2, 16, 16], "tree"]]


def test_chunked_kernel_matches_the_stepwise_rule_on_every_node():
    for out_error, state_error, in_place_error, window_error in run_interpreted(STEPWISE, json.dumps([SHAPES, "cpu"]),
                                                                                timeout=900):
        assert out_error < 1e-5 and state_error < 1e-5 and in_place_error < 1e-5 and window_error == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiled Triton needs CUDA")
def test_chunked_kernel_matches_the_stepwise_rule_on_cuda():
    """Compiled: float32-close, wider and larger trees too."""
    cases = SHAPES + [[256, [4, 64, 64], "tree"], [128, [48, 128, 128], "tree"], [33, [48, 128, 128], "chain"]]
    errors = run_interpreted(STEPWISE, json.dumps([cases, "cuda"]), timeout=900, interpret=False)
    for out_error, state_error, in_place_error, window_error in errors:
        assert out_error < 1e-4 and state_error < 1e-4 and in_place_error < 1e-4 and window_error == 0


def test_chunked_kernel_runs_the_chains_and_trees_of_the_oracle_tests():
    # the oracle tests of tests/test_hybrid_target.py on a model narrow enough for the interpreter: their chains
    # (DFlash blocks, partly and wholly accepted) go through the chunked kernels, their trees the sequence path or,
    # as at widths where `chunked_trees` holds, the chunked kernels too; reserved commits build the state in place
    tests = ["test_every_tree_node_matches_its_ancestor_path", "test_commit_installs_the_state_of_a_plain_forward",
             "test_reserved_commits_install_the_state_of_a_plain_forward"]
    cases = [[test, trees] for trees in (False, True) for test in tests]
    ran = run_interpreted(CHECK, json.dumps(cases), timeout=900)
    runs = {(test, trees): (chunked, states) for (test, trees), (_, chunked, states) in zip(cases, ran)}
    tree, *commits = tests
    assert runs[tree, False][0] > 0 and runs[tree, True][0] > runs[tree, False][0]
    for commit in commits:
        (chains, states), (both, both_states) = runs[commit, False], runs[commit, True]
        assert chains > 0 and states > 0 and both > chains and both_states > states


def test_chunked_kernels_compile_for_hopper():
    """Triton's compiler types what its interpreter does not; both kernels compile for sm_90 here, without a GPU."""
    from remote.kernels import gdn_chunked
    from tests.test_tree_kernel import hopper_ptx

    common = {"k": "*bf16", "visible": "*u8", "state": "*fp32", "N": "i32", "HV": "i32", "k_t": "i32", "k_h": "i32"}
    tree = {**common, "q": "*bf16", "v": "*bf16", "g": "*fp32", "beta": "*bf16", "out": "*bf16", "u_out": "*fp32",
            "lg_out": "*fp32", **{name: "i32" for name in ("q_t", "q_h", "v_t", "v_h")}, "scale": "fp32"}
    state = {**common, "u": "*fp32", "lg": "*fp32", "node": "*i64", "new": "*fp32", "bank": "*bf16",
             "conv_index": "*i64", "conv": "*bf16", "C": "i32", "bank_c": "i32"}
    for columns in (32, 64):            # both value blockings `_blocks` picks
        sizes = {"DK": 128, "DV": 128, "BC": 16, "BK": 128, "BV": columns, "DOT": "ieee"}
        assert ".entry" in hopper_ptx(gdn_chunked._chunked_gdn_kernel, tree, {**sizes, "FACTORS": 4})
        for window in (0, 4):           # without and with the conv window
            assert ".entry" in hopper_ptx(gdn_chunked._node_state_kernel, state, {**sizes, "KC": window, "CB": 128})


@pytest.mark.parametrize("value_heads, chunked", [(16, False), (32, True)])
def test_trees_take_the_chunked_form_from_wide_layers_up(value_heads, chunked):
    """The kernel choice for a CUDA device (made here without one: it only reads the layer's widths): trees of a
    layer whose recurrent state is CHUNKED_TREES_FROM or more (32 heads of 128 x 128: 2 MiB) go through the chunked
    form, narrower ones through the per-node kernel; chains always through the chunked form; AR's step through
    ours where fla is not installed."""
    from transformers import AutoConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet

    from remote.kernels.gdn_paths import CHUNKED_TREES_FROM, select_gdn_kernels

    config = AutoConfig.for_model("qwen3_5_text", hidden_size=32, linear_num_key_heads=value_heads // 2,
                                  linear_num_value_heads=value_heads, linear_key_head_dim=128,
                                  linear_value_head_dim=128)
    gdn = Qwen3_5GatedDeltaNet(config, layer_idx=0)
    kernels = select_gdn_kernels(gdn, torch.device("cuda"), "auto")
    assert (4 * value_heads * 128 * 128 >= CHUNKED_TREES_FROM) == chunked
    assert kernels.chunked is not None and kernels.chunked_trees == chunked
    parts = kernels.path.split("+")
    assert ("chunked" if chunked else "tree") in parts and ("tree" if chunked else "chunked") not in parts
    # AR's one-token step: fla's where installed, ours (the tree kernel over one node) where not
    assert ("token" in parts) == ("fla" not in parts) == (kernels.token is not None)
