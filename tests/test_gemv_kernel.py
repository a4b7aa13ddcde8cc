"""The projection kernels of one row and of a few (remote.kernels.gemv) against F.linear: run by Triton's interpreter
on the CPU (a subprocess: the interpreter is chosen when the kernel module is imported), compiled for sm_90 here, and
on CUDA through `linear` with its choice of kernel or cuBLAS; off their ground (CPU, float32, over 64 rows) it is
F.linear."""
from __future__ import annotations

import json

import pytest
import torch

from tests.interpreted import run_interpreted

pytest.importorskip("triton")

CHECK = r"""
import json, sys
import torch
from remote.kernels.gemv import gemv_interpreted

out = []
for n, k, bias, lead, bn, bk in json.loads(sys.argv[1]):
    g = torch.Generator().manual_seed(n * k)
    w, x = torch.randn(n, k, generator=g), torch.randn(*lead, k, generator=g)
    b = torch.randn(n, generator=g) if bias else None
    got = gemv_interpreted(x, w, b, BN=bn, BK=bk)
    want = torch.nn.functional.linear(x, w, b)
    out.append({"shape": list(got.shape), "want": list(want.shape), "error": (got - want).abs().max().item()})
print(json.dumps(out))
"""
# (N, K, bias, x's leading shape, columns a program, K block): N and K not multiples of the blocks, a bias, x as an
# AR step's [1, 1, K] and as a bare [K]; then a verify's rows (33: padded to 64), two rows (padded to 16), 17 rows
# with a bias
CASES = [(37, 200, False, [1, 1], 4, 64), (64, 256, True, [1], 8, 128), (5, 70, True, [], 2, 32),
         (70, 200, False, [1, 33], 16, 64), (40, 96, False, [2], 32, 32), (33, 130, True, [17], 16, 64)]


def test_interpreted_kernel_equals_linear():
    results = run_interpreted(CHECK, json.dumps(CASES))
    assert len(results) == len(CASES)
    for r in results:
        assert r["shape"] == r["want"] and r["error"] < 1e-4, r


def test_kernel_compiles_for_hopper():
    from remote.kernels import gemv
    from tests.test_tree_kernel import hopper_ptx

    signature = {"x": "*bf16", "w": "*bf16", "b": "*bf16", "out": "*bf16", "N": "i32", "K": "i32", "stride_n": "i32"}
    ptx = hopper_ptx(gemv._gemv_fixed, signature, {"HAS_BIAS": True, "BN": 8, "BK": 512})
    assert ".target sm_90" in ptx and "ld.global" in ptx
    ptx = hopper_ptx(gemv._rows_fixed, {**signature, "M": "i32"}, {"HAS_BIAS": False, "BM": 64, "BN": 64, "BK": 128})
    assert "mma" in ptx                                              # the few rows' product on tensor cores


def test_off_its_ground_it_is_linear():
    from remote.kernels import gemv

    w, x = torch.randn(16, 32), torch.randn(1, 32)
    assert not gemv.eligible(x, w)                                   # CPU, float32
    assert torch.equal(gemv.linear(x, w), torch.nn.functional.linear(x, w))
    assert not gemv.eligible(torch.randn(3, 32, dtype=torch.bfloat16), w.bfloat16())     # CPU
    assert [gemv.bucket(m) for m in (1, 2, 16, 17, 33, 64)] == [1, 16, 16, 32, 64, 64]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the kernel runs on CUDA")
def test_cuda_linear_equals_cublas_and_picks_per_shape():
    from remote.kernels import gemv

    for n, k, bias, m in [(4096, 4096, False, 1), (6144, 4096, False, 1), (4096, 12288, False, 1),
                          (1000, 896, True, 1), (4096, 4096, False, 33), (6144, 4096, False, 64), (1000, 896, True, 7)]:
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        x = torch.randn(1, m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias else None
        want = torch.nn.functional.linear(x, w, b).float()
        assert (gemv._op(x, w, b).float() - want).abs().max().item() < 2e-2
        assert (gemv.linear(x, w, b).float() - want).abs().max().item() < 2e-2
        assert (tuple(w.shape), w.dtype, bias, x.device, gemv.bucket(m)) in gemv.FASTER   # measured once, then kept


SPLIT = r"""
import json, sys
import torch
from remote.kernels.gemm_split import split_interpreted

out = []
for n, k, bias, lead, bn, bk, split in json.loads(sys.argv[1]):
    g = torch.Generator().manual_seed(n * k + split)
    w, x = torch.randn(n, k, generator=g), torch.randn(*lead, k, generator=g)
    b = torch.randn(n, generator=g) if bias else None
    want = torch.nn.functional.linear(x, w, b)
    first = split_interpreted(x, w, b, BN=bn, BK=bk, SPLIT=split)
    again = split_interpreted(x, w, b, BN=bn, BK=bk, SPLIT=split)      # the counters were left at zero
    out.append({"shape": list(first.shape), "want": list(want.shape), "error": (first - want).abs().max().item(),
                "same": torch.equal(first, again)})
print(json.dumps(out))
"""
# (N, K, bias, x's leading shape, columns a program, K block, splits): a verify's 33 rows (padded to 64) with K not a
# multiple of the splits' chunks, 2 rows, 17 rows with a bias, a split whose last chunk is empty (K of 2 blocks, 4
# splits), N not a multiple of the column block
SPLIT_CASES = [(70, 200, False, [1, 33], 16, 32, 3), (40, 96, False, [2], 32, 32, 2), (33, 130, True, [17], 16, 64, 4),
               (48, 64, True, [5], 16, 32, 4), (37, 256, False, [64], 32, 64, 2)]


def test_interpreted_split_kernel_equals_linear():
    """remote.kernels.gemm_split: each column block's parts summed by its last program, the same bits every call."""
    results = run_interpreted(SPLIT, json.dumps(SPLIT_CASES))
    assert len(results) == len(SPLIT_CASES)
    for r in results:
        assert r["shape"] == r["want"] and r["error"] < 1e-4 and r["same"], r


def test_split_kernel_compiles_for_hopper():
    from remote.kernels import gemm_split
    from tests.test_tree_kernel import hopper_ptx

    signature = {"x": "*bf16", "w": "*bf16", "b": "*bf16", "out": "*bf16", "part": "*fp32", "count": "*i32",
                 "M": "i32", "N": "i32", "K": "i32", "stride_n": "i32"}
    ptx = hopper_ptx(gemm_split._split_kernel, signature, {"HAS_BIAS": True, "BM": 64, "BN": 128, "BK": 64,
                                                           "SPLIT": 4})
    assert "mma" in ptx and "atom" in ptx


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the kernel runs on CUDA")
def test_cuda_split_kernel_equals_cublas_eagerly_and_replayed():
    from remote.kernels import gemm_split

    for n, k, m in [(5120, 6144, 33), (5120, 17408, 64), (14336, 5120, 40), (1000, 896, 7)]:
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        x = torch.randn(1, m, k, device="cuda", dtype=torch.bfloat16)
        want = torch.nn.functional.linear(x, w).float()
        first = gemm_split.split_linear(x, w)
        assert (first.float() - want).abs().max().item() < 2e-2
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = gemm_split.split_linear(x, w)
        for _ in range(3):
            graph.replay()
            assert torch.equal(out, first)
