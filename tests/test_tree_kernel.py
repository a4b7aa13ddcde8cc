"""The one-kernel tree build (remote.kernels.tree_search) against remote.decoding.tree_build's torch ops, run by
Triton's interpreter on the CPU (a subprocess: the interpreter is chosen when the kernel module is imported): the same
tokens, parents, depths, ancestry, path log-probs and tree_budget=auto's predictions for budgets from 1 to past the
candidates of one level, vocabularies smaller and larger than the budget."""
from __future__ import annotations

import json

import pytest
import torch

from tests.interpreted import run_interpreted

pytest.importorskip("triton")

CHECK = r"""
import json, sys
import torch
from remote.decoding import tree_build
from remote.kernels import tree_search

if sys.argv[2:] == ["sorted"]:      # as on a Triton without tl.topk: every key sorted, the first ones kept
    import triton.language as tl
    tree_search.HAS_TOPK = tl.constexpr(False)
out = []
for depth, vocab, budget, seed in json.loads(sys.argv[1]):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(depth, vocab, generator=g) * 3
    if seed % 2:   # impossible tokens: -inf log-probs (the kernel's finite floor must match the torch path's)
        logits[:, : vocab // 3] = float("-inf")
    # A confident drafter (a deep spine). Seeds 165 and 130 were chosen so that at some level n - 1 kept prefixes
    # score at least the next level's best: one short of where the kernel's search may stop
    if seed % 5 == 0:
        logits[torch.arange(depth), torch.randint(vocab // 3, vocab, (depth,), generator=g)] += 9
    ref = tree_build.best_first_tree(logits, budget)
    k = min(budget, vocab)
    top_lp, top_ids = torch.topk(torch.log_softmax(logits.float(), dim=-1), k, dim=-1)
    plan = tree_build._plan(depth, k, budget, logits.device)
    n = min(budget, plan.real)
    sizes = (1, 7, budget, 2 * budget + 1)      # tree_budget=auto's predictions, past the tree's size too
    ref_expected = tree_build.predictions(ref.path_lp, budget, sizes)
    tokens, parents, depths, ancestors, path_lp, expected = tree_search.build_interpreted(
        top_lp, top_ids, plan.parent, plan.rank, torch.tensor(sizes), budget, plan.levels, n)
    want = ref.ancestry()
    top_k = None                         # the interpreter sorts slowly: small cases only
    if depth * vocab <= 2000:
        lp_k, ids_k = tree_search.top_k_interpreted(logits, k, chunk=16)   # several chunks a row
        finite = torch.isfinite(top_lp)  # -inf logits tie: their order is free
        top_k = torch.equal(torch.isfinite(lp_k), finite) and torch.equal(ids_k[finite], top_ids[finite]) and \
            torch.allclose(lp_k[finite], top_lp[finite], atol=1e-5)
    out.append({"case": [depth, vocab, budget, seed], "top_k": top_k,
                "tokens": torch.equal(tokens, ref.tokens), "parents": torch.equal(parents, want.parents),
                "depths": torch.equal(depths, want.depth), "ancestors": torch.equal(ancestors, want.ancestors),
                "path_lp": torch.allclose(path_lp, ref.path_lp, atol=1e-4), "n": n,
                "expected": bool(((expected - ref_expected).abs() <= 1).all()) and
                torch.equal(expected < 0, ref_expected < 0)})
print(json.dumps(out))
"""


def test_kernel_builds_the_torch_tree():
    # (depth, vocab, budget, seed); the interpreter takes ~5-10 s per case, so the demo's full shape (15, 4096,
    # 128) is left to the CUDA test in tests/test_graph_decode.py
    cases = [(15, 500, 32, 9), (7, 50, 64, 2), (4, 9, 16, 5), (15, 300, 1, 3), (6, 200, 100, 11), (15, 200, 32, 165),
             (10, 100, 16, 130), (2, 6, 30, 13)]
    results = run_interpreted(CHECK, json.dumps(cases))
    assert len(results) == len(cases)
    for r in results:
        # the last case takes impossible prefixes (all scored at the -1e30 floor: equal scores), whose order within
        # a level is free; across levels both keep the shallower first, so the depths still agree
        keys = ("depths", "top_k", "expected") if r["case"] == list(cases[-1]) else \
            ("tokens", "parents", "depths", "ancestors", "path_lp", "top_k", "expected")
        assert r["n"] > 0 and all(r[key] is not False for key in keys), r
    assert sum(r["top_k"] is True for r in results) >= 3


def test_kernel_without_tl_topk_builds_the_torch_tree():
    """Triton before tl.topk (torch 2.4's): the full sort's first keys, at a level, the final order and the top-k."""
    cases = [(7, 50, 64, 2), (4, 9, 16, 5), (10, 100, 16, 130)]
    results = run_interpreted(CHECK, json.dumps(cases), "sorted")
    assert [r["case"] for r in results] == [list(c) for c in cases]
    for r in results:
        assert all(r[key] is True for key in ("tokens", "parents", "depths", "ancestors", "path_lp", "top_k",
                                              "expected")), r


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the kernels run on CUDA")
@pytest.mark.parametrize("vocab,budget", [(4096, 64), (4096, 128), (4096, 512), (1000, 300), (151936, 64)])
def test_cuda_tree_equals_the_torch_tree(vocab, budget):
    """The runner's full shapes (15 levels, the demo's 4096 and Qwen's 151936 vocabularies, the latter through
    torch.topk) on the GPU against the CPU's torch ops."""
    from remote.decoding.tree_build import best_first_tree

    logits = torch.randn(15, vocab, generator=torch.Generator().manual_seed(budget)) * 3
    sizes = (7, 63, 255)
    cpu, gpu = best_first_tree(logits, budget, sizes), best_first_tree(logits.cuda(), budget, sizes)
    assert gpu.built is not None, "the kernel did not run"
    want, got = cpu.ancestry(), gpu.ancestry()
    assert torch.equal(gpu.tokens.cpu(), cpu.tokens) and torch.equal(got.parents.cpu(), want.parents)
    assert torch.equal(got.depth.cpu(), want.depth) and torch.equal(got.ancestors.cpu(), want.ancestors)
    assert torch.allclose(gpu.path_lp.cpu(), cpu.path_lp, atol=1e-4)
    expected = gpu.expected.cpu()
    assert (expected - cpu.expected).abs().max() <= 1 and torch.equal(expected < 0, cpu.expected < 0)


def hopper_ptx(kernel, signature: dict, constants: dict) -> str:
    """PTX of a Triton kernel compiled for sm_90 on this machine (no GPU needed); `signature` names the runtime
    arguments' types, `constants` the constexpr values."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {**signature, **{name: "constexpr" for name in constants}}
    return triton.compile(ASTSource(kernel, signature, constants), target=GPUTarget("cuda", 90, 32)).asm["ptx"]


def test_kernels_compile_for_hopper():
    """Triton's compiler types what its interpreter does not (a loop-carried int32 that becomes int64 compiled
    only on the GPU): both kernels compile for sm_90 here, without a GPU."""
    from remote.kernels import tree_search

    longs = ("top_ids", "cand_parent", "cand_rank", "vindex", "picks", "tokens", "parents", "depths", "ancestors",
             "sizes", "expected")
    tree = {**{name: "*i64" for name in longs}, "top_lp": "*fp32", "path_lp": "*fp32",
            **{name: "i32" for name in ("K", "C", "B", "levels", "n", "S")}}
    shapes = {"CP": 1024, "KP": 128, "SP": 2048, "NK": 128, "NP": 256, "HP": 16, "LH": 4, "ZP": 8}
    chunk = {"logits": "*fp32", "part_key": "*i64", "part_max": "*fp32", "part_sum": "*fp32",
             **{name: "i32" for name in ("V", "per", "stride", "tie_top")}}
    merge = {"part_key": "*i64", "part_max": "*fp32", "part_sum": "*fp32", "top_lp": "*fp32", "top_ids": "*i64",
             **{name: "i32" for name in ("K", "chunks", "per", "tie_top")}}
    for kernel, signature, constants in [(tree_search._tree_kernel, tree, shapes),
                                         (tree_search._top_k_chunk_kernel, chunk, {"CHUNK": 512, "PER": 128}),
                                         (tree_search._top_k_merge_kernel, merge, {"MP": 1024, "CP": 8, "KP": 128})]:
        assert ".entry" in hopper_ptx(kernel, signature, constants)
