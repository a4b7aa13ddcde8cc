"""The GDN tree kernel (remote.kernels.gdn_tree) inside `HybridTarget`, against the oracle (the model's own forward
over each ancestor path) on a tiny random hybrid model in float32: Triton's interpreter runs it on the CPU (in a
subprocess: the interpreter is chosen when the kernel module is imported), keeping every node's state and, with a
zero keep limit, recomputing the accepted node's at commit; both kernels compile for sm_90 without a GPU."""
from __future__ import annotations

import json

import pytest

from tests.interpreted import run_interpreted

pytest.importorskip("triton")

CHECK = r"""
import dataclasses, json, sys
from remote.kernels import gdn_tree as gdn_tree_kernel
from remote.models import gdn, hybrid_target
from tests import test_hybrid_target as oracle

calls = []
def counted(*args, **kwargs):
    calls.append(kwargs["keep"])
    return gdn_tree_kernel.tree_recurrence(*args, **kwargs)

select = hybrid_target.select_gdn_kernels
hybrid_target.select_gdn_kernels = lambda *a, **kw: dataclasses.replace(select(*a, **kw), tree=counted)
ran = []
for test, keep_limit in json.loads(sys.argv[1]):
    gdn.KEEP_LIMIT = keep_limit
    del calls[:]
    getattr(oracle, test)("qwen3_5-narrow")
    ran.append([test, len(calls), sum(calls)])     # launches, of which kept every node's state
print(json.dumps(ran))
"""


def test_tree_kernel_matches_the_oracle_under_the_interpreter():
    # the oracle tests of tests/test_hybrid_target.py on a model narrow enough for the interpreter; with a zero keep
    # limit commit recomputes the accepted node's state with the kernel instead of copying it
    from remote.models.gdn import KEEP_LIMIT

    cases = [("test_every_tree_node_matches_its_ancestor_path", KEEP_LIMIT),
             ("test_commit_installs_the_state_of_a_plain_forward", KEEP_LIMIT),
             ("test_commit_installs_the_state_of_a_plain_forward", 0)]
    ran = run_interpreted(CHECK, json.dumps(cases), timeout=900)
    assert [test for test, _, _ in ran] == [test for test, _ in cases]
    (_, tree_calls, tree_kept), (_, commit_calls, commit_kept), (_, recompute_calls, recompute_kept) = ran
    assert tree_calls == tree_kept > 0 and commit_calls == commit_kept > 0     # verifies keep node states
    assert recompute_calls > recompute_kept > 0    # without: commit calls it again for the accepted node alone


STACKED = r"""
import dataclasses, json
from remote.kernels import gdn_tree as gdn_tree_kernel
from remote.models import gdn_stack, hybrid_target
from tests import test_graph_decode

select = hybrid_target.select_gdn_kernels
hybrid_target.select_gdn_kernels = lambda *a, **kw: dataclasses.replace(select(*a, **kw),
                                                                         tree=gdn_tree_kernel.tree_recurrence)
installs = []
install = gdn_stack.GdnStack.install
def counted(self, *args):
    installs.append(install(self, *args))
    return installs[-1]
gdn_stack.GdnStack.install = counted
for seed in (0, 1):
    test_graph_decode.test_hybrid_static_commit_equals_the_eager_commit("3to1", seed)
print(json.dumps(installs))
"""


def test_stacked_commit_installs_every_layer_as_the_eager_commit():
    """With node states kept (the tree kernel), a static verify writes every GDN layer's bank and node states into
    its device's stack and the commit installs all layers in two gathers (remote.models.gdn_stack); the layer
    states then equal the eager commit's (a chain and a tree, several accepted paths each)."""
    installs = run_interpreted(STACKED, timeout=900)
    assert installs and all(installs), installs


def test_tree_kernel_compiles_for_hopper():
    """Triton's compiler types what its interpreter does not; the kernel compiles for sm_90 here, without a GPU."""
    from remote.kernels import gdn_tree as gdn_tree_kernel
    from tests.test_tree_kernel import hopper_ptx

    pointers = {"q": "*bf16", "k": "*bf16", "v": "*bf16", "g": "*fp32", "beta": "*bf16", "state": "*fp32",
                "ancestors": "*i64", "depth": "*i64", "out": "*bf16", "states": "*fp32"}
    ints = {name: "i32" for name in ("HV", "H", "q_t", "q_h", "k_t", "k_h", "v_t", "v_h")}
    constants = {"DK": 128, "DV": 128, "BK": 128, "BV": 8, "HP": 16, "KEEP": True}
    assert ".entry" in hopper_ptx(gdn_tree_kernel._tree_gdn_kernel, {**pointers, **ints, "scale": "fp32"}, constants)
