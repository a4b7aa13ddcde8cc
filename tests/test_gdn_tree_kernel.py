"""The GDN tree kernel (remote.kernels.gdn_tree) inside `HybridTarget`, against the oracle (the model's own forward
over each ancestor path) on a tiny random hybrid model in float32: Triton's interpreter runs it on the CPU (in a
subprocess: the interpreter is chosen when the kernel module is imported), keeping every node's state and, with a
zero keep limit, recomputing the accepted node's at commit; the commit's one-launch install of kept node states
(remote.kernels.gdn_install) bit for bit against its torch gathers, and its recompute from saved node inputs bit
for bit against the kept states; the kernels compile for sm_90 without a GPU."""
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
    key = f"{gdn.KEEP_LIMIT} {gdn.KEEP_INPUTS}"
    installs.setdefault(key, []).append(install(self, *args))
    return installs[key][-1]
gdn_stack.GdnStack.install = counted
for keep_limit, inputs in ((gdn.KEEP_LIMIT, False), (0, False), (gdn.KEEP_LIMIT, True)):
    gdn.KEEP_LIMIT, gdn.KEEP_INPUTS = keep_limit, inputs
    for seed in (0, 1):
        test_graph_decode.test_hybrid_static_commit_equals_the_eager_commit("3to1", seed, paths=2)
print(json.dumps(list(installs.values())))
"""


def test_stacked_commit_installs_every_layer_as_the_eager_commit():
    """With node states kept (the tree kernel), a static verify writes every GDN layer's bank and node states into
    its device's stack and the commit installs all layers in one launch (remote.models.gdn_stack); with a zero keep
    limit the commit recomputes each layer's accepted state into its reserved one in place, a layer at a time; with
    KEEP_INPUTS the verify keeps node inputs and the commit recomputes every layer's in one launch. Every way the
    layer states then equal the eager commit's (a chain and a tree, two accepted paths each)."""
    kept, recomputed, inputs = run_interpreted(STACKED, timeout=900)
    assert kept and all(kept), kept
    assert recomputed and not any(recomputed), recomputed
    assert inputs and all(inputs), inputs


TOKEN = r"""
import dataclasses, json
from remote.kernels import gdn_tree
from remote.models import hybrid_target
from tests import test_graph_decode

calls = []
def counted(*args):
    calls.append(1)
    return gdn_tree.token_step(*args)

select = hybrid_target.select_gdn_kernels
hybrid_target.select_gdn_kernels = lambda *a, **kw: dataclasses.replace(select(*a, **kw), token=counted)
for shape in ("3to1", "1to1"):
    test_graph_decode.test_hybrid_ar_steps_equal_the_model_own_decoding(shape)
print(json.dumps(len(calls)))
"""


def test_one_token_steps_through_the_tree_kernel_decode_as_the_model():
    """AR's GDN step through the tree kernel over a one-node tree, the state advanced in place (`token_step`, what
    runs where fla is not installed): the hybrid graph decoder's AR tokens stay the model's own cached decoding."""
    assert run_interpreted(TOKEN, timeout=900) > 0


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


RECOMPUTE = r"""
import json, sys
import torch
from remote.kernels import gdn_install, gdn_tree
from tests.test_gdn_tree_kernel import recompute_case

out = []
for case in json.loads(sys.argv[1]):
    (bank, nodes, saved, ancestors, depth, conv_index, last), (conv, rec) = recompute_case(*case)
    kernel, reference = (conv.clone(), rec.clone()), (conv.clone(), rec.clone())      # from the committed state
    gdn_install.install_interpreted(bank, nodes, conv_index, last, conv, rec)            # the kept state
    gdn_install.recompute_interpreted(bank, saved, ancestors, depth, conv_index, last, *kernel)
    gdn_install.torch_recompute(bank, saved, ancestors, depth, conv_index, last, *reference)
    out.append([torch.equal(kernel[0], conv), torch.equal(kernel[1], rec), torch.equal(reference[0], conv),
                (reference[1] - rec).abs().max().item(), int(depth[last[0]])])
print(json.dumps(out))
"""

RECOMPUTE_CASES = [(2, 16, 0, 3), (3, 16, 1, 1), (1, 24, 2, 8)]       # (layers, nodes, seed, reach)


def recompute_case(layers: int, nodes: int, seed: int, reach: int, device: str = "cpu"):
    """A verify of a random tree by the tree kernel, every layer both ways: node states kept, and node inputs
    saved; (bank, nodes, saved, ancestors, depth, conv_index, last) and the committed (conv, rec) to install
    into. Small `reach`: a deep tree."""
    import random

    from remote.kernels import gdn_tree
    from remote.tree import Ancestry
    from tests.test_hybrid_models import random_tree

    g = torch.Generator().manual_seed(seed)
    heads, dk, dv, channels, k = 2, 8, 24, 12, 4         # dv past BLOCK_V: several value blocks a head
    tree = Ancestry.from_parents(random_tree(random.Random(seed), nodes, reach))
    ancestors, depth = tree.ancestors.to(device), tree.depth.to(device)
    rec = torch.randn(layers, heads, dk, dv, generator=g)
    kept = torch.empty(layers, nodes, heads, dk, dv)
    saved = torch.empty(layers, nodes, heads, gdn_tree.saved_width(dk, dv))
    rec, kept, saved = rec.to(device), kept.to(device), saved.to(device)
    for layer in range(layers):
        q, kk = (torch.randn(nodes, heads, dk, generator=g).to(torch.bfloat16).to(device) for _ in range(2))
        v = torch.randn(nodes, heads, dv, generator=g).to(torch.bfloat16).to(device)
        decay = (-torch.rand(nodes, heads, generator=g)).to(device)
        beta = torch.rand(nodes, heads, generator=g).to(torch.bfloat16).to(device)
        gdn_tree.tree_recurrence(q, kk, v, decay, beta, rec[layer], ancestors, depth, keep=True, states=kept[layer])
        gdn_tree.tree_recurrence(q, kk, v, decay, beta, rec[layer], ancestors, depth, keep=False, saved=saved[layer])
    bank = torch.randn(layers, channels, k + nodes, generator=g).to(torch.bfloat16).to(device)
    conv_index = torch.randint(0, k + nodes, (nodes, k), generator=g).to(device)
    last = int(torch.argmax(tree.depth)) if seed % 2 == 0 else nodes // 2      # the deepest node, or another
    conv = torch.zeros(layers, channels, k, dtype=torch.bfloat16, device=device)
    return (bank, kept, saved, ancestors, depth, conv_index, torch.tensor([last], device=device)), (conv, rec.clone())


def test_recompute_kernel_gives_the_kept_state_bit_for_bit():
    """The commit's recompute from the node inputs a verify saved (remote.kernels.gdn_install.recompute) installs
    the conv window and, in place, the very state the tree kernel would have kept, for every layer in one launch; its
    torch definition agrees to rounding. Deep and bushy trees, several value blocks a head."""
    got = run_interpreted(RECOMPUTE, json.dumps(RECOMPUTE_CASES), timeout=900)
    assert [ok[:3] for ok in got] == [[True, True, True]] * len(RECOMPUTE_CASES), got
    assert all(diff < 1e-4 for *_, diff, _ in got), got
    assert max(depth for *_, depth in got) >= 4          # a path of several steps was recomputed


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the kernel runs on CUDA")
def test_cuda_recompute_gives_the_kept_state():
    from remote.kernels import gdn_install

    for case in RECOMPUTE_CASES:
        (bank, nodes, saved, ancestors, depth, conv_index, last), (conv, rec) = recompute_case(*case, device="cuda")
        kernel = conv.clone(), rec.clone()
        gdn_install.install(bank, nodes, conv_index, last, conv, rec)
        gdn_install.recompute(bank, saved, ancestors, depth, conv_index, last, *kernel)
        assert torch.equal(kernel[0], conv), case
        assert torch.allclose(kernel[1], rec, atol=1e-6, rtol=1e-6), (case, (kernel[1] - rec).abs().max().item())


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
    for keep, save in ((True, False), (False, True)):
        constants = {"DK": 128, "DV": 128, "BK": 128, "BV": 8, "HP": 16, "KEEP": keep, "SAVE": save}
        assert ".entry" in hopper_ptx(gdn_tree_kernel._tree_gdn_kernel, {**pointers, **ints, "scale": "fp32"},
                                      constants)
    install = {"bank": "*bf16", "nodes": "*fp32", "conv_index": "*i64", "last": "*i64", "conv": "*bf16",
               "rec": "*fp32", **{name: "i32" for name in ("C", "K", "width", "N", "R")}}
    assert ".entry" in hopper_ptx(gdn_install._install_kernel, install, {"BLOCK": gdn_install.BLOCK})
    recompute = {"bank": "*bf16", "saved": "*fp32", "ancestors": "*i64", "depth": "*i64", "conv_index": "*i64",
                 "last": "*i64", "conv": "*bf16", "rec": "*fp32",
                 **{name: "i32" for name in ("C", "K", "width", "N", "H", "HV", "NVB")}}
    assert ".entry" in hopper_ptx(gdn_install._recompute_kernel, recompute,
                                  {"DK": 128, "DV": 128, "BK": 128, "BV": 16, "HP": 16, "BLOCK": gdn_install.BLOCK})
