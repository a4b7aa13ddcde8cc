"""The two-launch GDN tree kernels (remote.kernels.gdn_solve) on the CPU under Triton's interpreter (a subprocess: the
interpreter is chosen when Triton is imported): against a step-by-step delta rule down every node's path, for random
trees, deep spines and chains (each node's output, and commit's state after each node, also in place with its conv
window), against the chunked kernel's corrections, at both products' precisions, and inside `HybridTarget`'s oracle
tests; the kernels compile for sm_90 without a GPU."""
from __future__ import annotations

import json

import pytest
import torch

from tests.interpreted import run_interpreted

pytest.importorskip("triton")

CHECK = r"""
import json, random, sys, torch
from remote.kernels import gdn_chunked, gdn_solve
from remote.tree import Ancestry
from tests.gdn_reference import inputs, states_errors, stepwise

def parents_of(n, shape):
    if shape == "chain":
        return [-1] + list(range(n - 1))
    if shape == "spine":      # a confident drafter's tree: a deep spine, siblings hanging off it
        return [-1] + [i - 1 if i < 16 else random.randrange(15) for i in range(1, n)]
    return [-1 if i == 0 or random.random() < 0.1 else random.randrange(i) for i in range(n)]

random.seed(0)
torch.manual_seed(0)
errors = []
cases, device, dot, *form = json.loads(sys.argv[1])
gdn_solve.DOT_SOLVE = gdn_solve.DOT_APPLY = dot
gdn_solve.FORM = form[0] if form else gdn_solve.FORM
for n, (hv, dk, dv), shape in cases:
    print("case", n, hv, dk, dv, shape, file=sys.stderr, flush=True)     # a case that hangs names itself
    parents = parents_of(n, shape)
    tree = Ancestry.from_parents(parents, device)
    q, k, v, g, beta, state = inputs(n, hv, dk, dv, device)
    out, solved = gdn_solve.tree_recurrence(q, k, v, g, beta, state, tree.visible, tree.height)
    _, (u, lg) = gdn_chunked.tree_recurrence(q, k, v, g, beta, state, tree.visible, tree.height)
    want_out, want_states = stepwise(q, k, v, g, beta, state, parents)
    built, in_place, window = states_errors(gdn_solve.node_state, k, solved, state, tree.visible, want_states)
    errors.append([tree.height, (out - want_out).abs().max().item(), built, (solved[0] - u).abs().max().item(),
                   (solved[1] - lg).abs().max().item(), in_place, window])
print(json.dumps(errors))
"""

# odd widths (masked tiles), 33 and 64 nodes (pads of 64), a chain of 16 (a DFlash block), a deep spine as deep as a
# block of 16 allows, a lone node, and 70 nodes (past MAX_NODES: the chunked kernel's)
SHAPES = [[33, [4, 12, 8], "tree"], [16, [2, 16, 24], "chain"], [64, [2, 32, 24], "spine"], [33, [2, 32, 32], "spine"],
          [1, [2, 16, 16], "tree"], [70, [2, 16, 16], "tree"]]


def test_solve_kernels_match_the_stepwise_rule_on_every_node():
    # (the interpreter computes every product in float32, whatever the precision asked: one run covers both)
    results = run_interpreted(CHECK, json.dumps([SHAPES, "cpu", "tf32x3"]), timeout=900)
    assert max(height for height, *_ in results) == 16          # the spines are as deep as a block of 16 allows
    for height, out_error, state_error, u_error, lg_error, in_place_error, window_error in results:
        assert out_error < 1e-5 and state_error < 1e-5 and u_error < 1e-5 and lg_error < 1e-6, results
        assert in_place_error < 1e-5 and window_error == 0, results


def test_the_powers_form_matches_the_stepwise_rule():
    """FORM "powers" (A's powers in the first launch, their factors applied per value block): the same results."""
    shapes = [SHAPES[0], SHAPES[1], SHAPES[2], SHAPES[4]]
    results = run_interpreted(CHECK, json.dumps([shapes, "cpu", "tf32x3", "powers"]), timeout=900)
    assert [height for height, *_ in results][1:3] == [16, 16]
    for height, out_error, state_error, u_error, lg_error, in_place_error, window_error in results:
        assert out_error < 1e-5 and state_error < 1e-5 and u_error < 1e-5 and lg_error < 1e-6, results
        assert in_place_error < 1e-5 and window_error == 0, results


ORACLE = r"""
import dataclasses, json, sys
from remote.kernels import gdn_chunked, gdn_solve
from remote.models import hybrid_target
from tests import test_hybrid_target as oracle

calls = []
select = hybrid_target.select_gdn_kernels     # on the CPU it picks no tree kernel: hand it the interpreted ones
def solve(*args):
    calls.append(1)
    return gdn_solve.tree_recurrence(*args)
hybrid_target.select_gdn_kernels = lambda *a, **kw: dataclasses.replace(
    select(*a, **kw), chunked=solve, chunked_state=gdn_chunked.node_state, chunked_trees=True)
for test in json.loads(sys.argv[1]):
    getattr(oracle, test)("qwen3_5-narrow")
print(json.dumps(len(calls)))
"""


def test_solve_kernels_pass_the_hybrid_targets_oracle_tests():
    """Inside `HybridTarget`, for every tree and chain (as at wide layers): each node's logits those of a plain
    forward over its ancestor path, and every commit the state of a plain forward (tests/test_hybrid_target.py)."""
    tests = ["test_every_tree_node_matches_its_ancestor_path",
             "test_reserved_commits_install_the_state_of_a_plain_forward"]
    assert run_interpreted(ORACLE, json.dumps(tests), timeout=900) > 0


# the 27B spine and chain for the powers form (its kernels compile anew)
CUDA_CASES = {"product": [SHAPES[0], [33, [48, 128, 128], "spine"], [33, [48, 128, 128], "tree"],
                          [64, [48, 128, 128], "spine"], [16, [48, 128, 128], "chain"]],
              "powers": [SHAPES[0], [33, [48, 128, 128], "spine"], [16, [48, 128, 128], "chain"]]}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiled Triton needs CUDA")
@pytest.mark.parametrize("form", ["product", "powers"])
def test_solve_kernels_match_the_stepwise_rule_on_cuda(form):
    """Compiled, at the products' precision the module ships (TF32x3), at Qwen3.6-27B widths and an odd one:
    float32-close. Each shape compiles its own kernels (26 s for the 64-node solve alone on a 2-core box); IEEE
    products at 64 nodes spill 12,960 bytes of stack a thread (`cuobjdump -res-usage`, 2026-12-07), so the suite's
    call ran out of time inside them: the interpreted test covers the arithmetic, this one the compiled kernels."""
    for height, out_error, state_error, u_error, _, in_place_error, window_error in run_interpreted(
            CHECK, json.dumps([CUDA_CASES[form], "cuda", "tf32x3", form]), timeout=150, interpret=False):
        assert out_error < 1e-4 and state_error < 1e-4 and u_error < 1e-4 and in_place_error < 1e-4
        assert window_error == 0


def test_solve_kernels_compile_for_hopper():
    """Triton's compiler types what its interpreter does not; every kernel of both forms compiles for sm_90 here,
    without a GPU, at Qwen3.6-27B widths and 33 nodes (padded to 64), at the precision shipped (TF32x3; IEEE
    products there are a bench variant that spills, and their compiles took a minute of this test on a 2-core box)."""
    from remote.kernels import gdn_solve
    from tests.test_tree_kernel import hopper_ptx

    common = {"q": "*bf16", "k": "*bf16", "beta": "*bf16", "N": "i32", "HV": "i32", "q_t": "i32", "q_h": "i32",
              "k_t": "i32", "k_h": "i32", "scale": "fp32"}
    solve = {**common, "g": "*fp32", "visible": "*u8", "t_out": "*fp32", "m_out": "*fp32", "lg_out": "*fp32"}
    state = {"k": "*bf16", "u": "*fp32", "lg": "*fp32", "visible": "*u8", "state": "*fp32", "node": "*i64",
             "new": "*fp32", "bank": "*bf16", "conv_index": "*i64", "conv": "*bf16", "N": "i32", "HV": "i32",
             "C": "i32", "k_t": "i32", "k_h": "i32", "bank_c": "i32"}
    apply = {**common, "v": "*bf16", "state": "*fp32", "t_in": "*fp32", "m_in": "*fp32", "lg_in": "*fp32",
             "out": "*bf16", "u_out": "*fp32", "v_t": "i32", "v_h": "i32"}
    powers = {"k": "*bf16", "g": "*fp32", "beta": "*bf16", "visible": "*u8", "p_out": "*fp32", "lg_out": "*fp32",
              "N": "i32", "HV": "i32", "k_t": "i32", "k_h": "i32"}
    apply_powers = {**{name: kind for name, kind in apply.items() if name not in ("t_in", "m_in")},
                    "visible": "*u8", "p_in": "*fp32"}
    sizes = {"DK": 128, "NP": 64, "BK": 128, "DOT": "tf32x3"}
    columns = {**sizes, "DV": 128, "BV": 32}
    for kernel, signature, constants in [(gdn_solve._solve_kernel, solve, {**sizes, "FACTORS": 4}),
                                         (gdn_solve._apply_kernel, apply, columns),
                                         (gdn_solve._powers_kernel, powers, {**sizes, "FACTORS": 4}),
                                         (gdn_solve._apply_powers_kernel, apply_powers, {**columns, "FACTORS": 4}),
                                         *((gdn_solve._state_kernel, state, {**columns, "KC": window, "CB": 64})
                                           for window in (0, 4))]:    # commit's state, without and with conv window
        assert ".entry" in hopper_ptx(kernel, signature, constants)
