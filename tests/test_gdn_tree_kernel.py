"""The GDN tree kernel (remote.kernels.gdn_tree) inside `HybridTarget`, against the oracle (the model's own forward
over each ancestor path) on a tiny random hybrid model in float32: Triton's interpreter runs it on the CPU (in a
subprocess: the interpreter is chosen when the kernel module is imported), keeping every node's state and, with a
zero keep limit, recomputing the accepted node's at commit; the commit's one-launch install of kept node states
(remote.kernels.gdn_install) bit for bit against its torch gathers; the kernels compile for sm_90 without a GPU."""
from __future__ import annotations

import json

import pytest
import torch

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
from remote.models import gdn, gdn_stack, hybrid_target
from tests import test_graph_decode

select = hybrid_target.select_gdn_kernels
hybrid_target.select_gdn_kernels = lambda *a, **kw: dataclasses.replace(select(*a, **kw),
                                                                         tree=gdn_tree_kernel.tree_recurrence)
installs = {}
install = gdn_stack.GdnStack.install
def counted(self, *args):
    installs[str(gdn.KEEP_LIMIT)].append(install(self, *args))
    return installs[str(gdn.KEEP_LIMIT)][-1]
gdn_stack.GdnStack.install = counted
for keep_limit in (gdn.KEEP_LIMIT, 0):
    gdn.KEEP_LIMIT, installs[str(keep_limit)] = keep_limit, []
    for seed in (0, 1):
        test_graph_decode.test_hybrid_static_commit_equals_the_eager_commit("3to1", seed)
print(json.dumps(list(installs.values())))
"""


def test_stacked_commit_installs_every_layer_as_the_eager_commit():
    """With node states kept (the tree kernel), a static verify writes every GDN layer's bank and node states into
    its device's stack and the commit installs all layers in one launch (remote.models.gdn_stack); with a zero keep
    limit the commit recomputes each layer's accepted state into its reserved one in place. Either way the layer
    states then equal the eager commit's (a chain and a tree, several accepted paths each)."""
    kept, recomputed = run_interpreted(STACKED, timeout=900)
    assert kept and all(kept), kept
    assert recomputed and not any(recomputed), recomputed


INSTALL = r"""
import json, sys
import torch
from remote.kernels import gdn_install
from tests.test_gdn_tree_kernel import install_case

out = []
for case in json.loads(sys.argv[1]):
    (bank, nodes, conv_index, last), (conv, rec) = install_case(*case)
    want_conv, want_rec = conv.clone(), rec.clone()
    gdn_install.torch_install(bank, nodes, conv_index, last, want_conv, want_rec)
    gdn_install.install_interpreted(bank, nodes, conv_index, last, conv, rec)
    out.append([torch.equal(conv, want_conv), torch.equal(rec, want_rec)])
print(json.dumps(out))
"""

INSTALL_CASES = [(2, 8, 3, 4, 0), (3, 300, 5, 2, 1), (1, 16, 1, 2000, 2)]   # (layers, channels, nodes, state, seed)


def install_case(layers: int, channels: int, nodes: int, state: int, seed: int, device: str = "cpu"):
    """(bank, nodes, conv_index, last) of a made-up commit, and the (conv, rec) it installs into; channels x K or
    the state size past gdn_install.BLOCK: several blocks a layer."""
    g = torch.Generator().manual_seed(seed)
    k = 4
    bank = torch.randn(layers, channels, k + nodes, generator=g).to(torch.bfloat16)
    kept = torch.randn(layers, nodes, 2, state, generator=g)
    conv_index = torch.randint(0, k + nodes, (nodes, k), generator=g)
    last = torch.tensor([nodes - 1 - seed % nodes])
    conv, rec = torch.zeros(layers, channels, k, dtype=torch.bfloat16), torch.zeros(layers, 2, state)
    return tuple(t.to(device) for t in (bank, kept, conv_index, last)), (conv.to(device), rec.to(device))


def test_install_kernel_equals_the_gathers():
    """One launch installs every layer's conv window and kept node state as the two gathers do, bit for bit."""
    assert run_interpreted(INSTALL, json.dumps(INSTALL_CASES)) == [[True, True]] * len(INSTALL_CASES)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the kernel runs on CUDA")
def test_cuda_install_equals_the_gathers():
    from remote.kernels import gdn_install

    for case in INSTALL_CASES:
        (bank, nodes, conv_index, last), (conv, rec) = install_case(*case, device="cuda")
        want_conv, want_rec = conv.clone(), rec.clone()
        gdn_install.torch_install(bank, nodes, conv_index, last, want_conv, want_rec)
        gdn_install.install(bank, nodes, conv_index, last, conv, rec)
        assert torch.equal(conv, want_conv) and torch.equal(rec, want_rec), case


def test_kernels_compile_for_hopper():
    """Triton's compiler types what its interpreter does not; the tree and install kernels compile for sm_90 here,
    without a GPU."""
    from remote.kernels import gdn_install, gdn_tree as gdn_tree_kernel
    from tests.test_tree_kernel import hopper_ptx

    pointers = {"q": "*bf16", "k": "*bf16", "v": "*bf16", "g": "*fp32", "beta": "*bf16", "state": "*fp32",
                "ancestors": "*i64", "depth": "*i64", "out": "*bf16", "states": "*fp32"}
    ints = {name: "i32" for name in ("HV", "H", "q_t", "q_h", "k_t", "k_h", "v_t", "v_h")}
    constants = {"DK": 128, "DV": 128, "BK": 128, "BV": 8, "HP": 16, "KEEP": True}
    assert ".entry" in hopper_ptx(gdn_tree_kernel._tree_gdn_kernel, {**pointers, **ints, "scale": "fp32"}, constants)
    install = {"bank": "*bf16", "nodes": "*fp32", "conv_index": "*i64", "last": "*i64", "conv": "*bf16",
               "rec": "*fp32", **{name: "i32" for name in ("C", "K", "width", "N", "R")}}
    assert ".entry" in hopper_ptx(gdn_install._install_kernel, install, {"BLOCK": gdn_install.BLOCK})
