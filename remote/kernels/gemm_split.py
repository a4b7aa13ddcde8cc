"""A verify's few-row projections (2-64 rows) split over the input length, each column block's parts summed by the last
of its programs to finish: a candidate beside remote.kernels.gemv's few-row kernel and cuBLAS, off (`ENABLED`) until
measured on a GPU.

Contract: `split_linear(x, weight, bias)` equals `F.linear` up to float32 summation order (the parts are added in
split order, whichever program finishes last: the same bits every call) where remote.kernels.gemv's few-row kernel
may run (CUDA, 16-bit x and weight, 2-64 rows); remote.kernels.gemv.linear times it against the others per shape
and keeps the fastest. Its workspace (each split's float32 part, a counter per column block, which the summing
program resets) is made once per shape outside any capture, so a captured step replays it. `split_interpreted(x,
weight, bias, BN, BK, SPLIT)` runs it under Triton's interpreter (TRITON_INTERPRET=1, CPU tensors) for tests.
"""
from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU-only installs: F.linear only
    triton = None

# Why: a verify of 33-65 rows reads the same weights as AR's one-row step, yet took 19.2 ms of weight-reading GEMMs at
# Qwen3.6-27B widths against the one-row kernel's 17.5 (one H100, 2026-12-05, `gpu_suite.sh q27b_kernels`). A
# program of the few-row kernel holds BN columns and the whole input length: at o_proj's and down_proj's 5120 columns
# 40-80 programs for 132 SMs, and it reads its rows of x once for every BN columns of weight (x's bytes over the
# weight's are BM / BN). Split over the input length, more programs stream the weight with wider column blocks
# (less x a weight byte), and the last program of a column block adds the parts (float32, in L2) and rounds once.
ENABLED = False          # off until `gpu_suite.sh gemm_split` times it (then remote.kernels.gemv offers it)
MAX_SPLIT = 4

if triton is not None:
    @triton.jit
    def _rows_product(x, w, cols, ms, live, used, K, stride_n, first, last, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr):
        """[BM, BN] float32: rows `ms` of x times columns `cols` of w over the input entries first..last - 1 (a
        tensor-core product per block of BK, the weight streamed once, evict-first)."""
        acc = tl.zeros([BM, BN], tl.float32)
        for start in range(first, last, BK):
            ks = start + tl.arange(0, BK)
            inside = ks < K
            xs = tl.load(x + ms[:, None] * K + ks[None, :], mask=used[:, None] & inside[None, :], other=0.0)
            ws = tl.load(w + cols[:, None] * stride_n + ks[None, :], mask=live[:, None] & inside[None, :],
                         other=0.0, eviction_policy="evict_first")
            acc = tl.dot(xs, tl.trans(ws), acc)
        return acc

    @triton.jit
    def _split_kernel(x, w, b, out, part, count, M, N, K, stride_n, HAS_BIAS: tl.constexpr, BM: tl.constexpr,
                      BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr):
        block, split = tl.program_id(0), tl.program_id(1)
        cols = block * BN + tl.arange(0, BN)
        ms = tl.arange(0, BM)
        live, used = cols < N, ms < M
        chunk = tl.cdiv(tl.cdiv(K, SPLIT), BK) * BK
        acc = _rows_product(x, w, cols, ms, live, used, K, stride_n, split * chunk,
                            tl.minimum(split * chunk + chunk, K), BM, BN, BK)
        keep = used[:, None] & live[None, :]
        tl.store(part + (split * BM + ms)[:, None] * N + cols[None, :], acc, mask=keep)
        tl.debug_barrier()                  # every thread's part stored before the program says it is done
        if tl.atomic_add(count + block, 1, sem="acq_rel") == SPLIT - 1:      # the block's last part: sum them
            total = tl.zeros([BM, BN], tl.float32)
            for s in tl.static_range(SPLIT):
                total += tl.load(part + (s * BM + ms)[:, None] * N + cols[None, :], mask=keep, other=0.0,
                                 cache_modifier=".cg")
            if HAS_BIAS:
                total += tl.load(b + cols, mask=live, other=0.0).to(tl.float32)[None, :]
            tl.store(out + ms[:, None] * N + cols[None, :], total.to(out.dtype.element_ty), mask=keep)
            tl.atomic_xchg(count + block, 0)            # ready for the next call (a replayed graph's too)

    def _graph_bench(kernel_call, quantiles):
        return triton.testing.do_bench_cudagraph(kernel_call, rep=10, quantiles=quantiles)

    _CONFIGS = [triton.Config({"BN": bn, "BK": bk, "SPLIT": s}, num_warps=w, num_stages=st)
                for bn, bk, s, w, st in ((64, 128, 2, 4, 4), (64, 128, 4, 4, 4), (128, 64, 2, 4, 4),
                                         (128, 64, 4, 4, 4), (128, 128, 4, 8, 3), (256, 64, 4, 8, 3),
                                         (32, 256, 2, 4, 3), (64, 256, 4, 4, 3))]
    _split_tuned = triton.autotune(configs=_CONFIGS, key=["N", "K", "BM"], do_bench=_graph_bench)(_split_kernel)

_WORKSPACE: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _workspace(n: int, bm: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Each split's part [MAX_SPLIT * bm, n] float32 and a zeroed counter per column block, made once per shape."""
    key = (n, bm, device)
    if key not in _WORKSPACE:
        with torch.inference_mode(False):
            _WORKSPACE[key] = (torch.empty(MAX_SPLIT * bm, n, dtype=torch.float32, device=device),
                               torch.zeros(triton.cdiv(n, 16), dtype=torch.int32, device=device))
    return _WORKSPACE[key]


def _launch(kernel, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, bm: int, **fixed):
    n, k = weight.shape
    m = x.numel() // k
    out = torch.empty(*x.shape[:-1], n, dtype=x.dtype, device=x.device)
    part, count = _workspace(n, bm, x.device)
    grid = lambda meta: (triton.cdiv(n, meta["BN"]), meta["SPLIT"])        # noqa: E731 - the autotuner's grid
    kernel[grid](x.reshape(m, k).contiguous(), weight, bias if bias is not None else x, out, part, count, m, n, k,
                 weight.stride(0), HAS_BIAS=bias is not None, BM=bm, **fixed)
    return out


@torch.compiler.disable
def split_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    m = x.numel() // weight.shape[1]
    return _launch(_split_tuned, x, weight, bias, max(16, 1 << (m - 1).bit_length()))


def split_interpreted(x, weight, bias=None, BN: int = 16, BK: int = 32, SPLIT: int = 3) -> torch.Tensor:
    """The kernel under Triton's interpreter (one fixed configuration), for tests."""
    m = x.numel() // weight.shape[1]
    return _launch(_split_kernel, x, weight, bias, max(16, 1 << (m - 1).bit_length()), BN=BN, BK=BK, SPLIT=SPLIT)
