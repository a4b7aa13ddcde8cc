"""Projections of one row (an AR step's) or a few (a verify's, up to 64) as Triton kernels that stream the weight
once, in place of cuBLAS.

Contract: `linear(x, weight, bias)` equals `F.linear` up to float32 summation order for x of any leading shape; the
kernels run only where they were built for (CUDA, Triton, 1-64 rows of x, x and weight of one 16-bit dtype,
weight rows contiguous) and measured faster (`_fastest`, per weight shape and row bucket, on first use; also
remote.kernels.gemm_split's split kernel where it is on); everything else goes to `F.linear`. `gemv_interpreted`
runs them under Triton's interpreter (TRITON_INTERPRET=1, CPU tensors) for tests. Under torch.compile they are an
opaque op.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

from . import gemm_split

try:
    import triton
    import triton.language as tl

    from .gemm_split import _rows_product
except ImportError:          # CPU-only installs: F.linear only
    triton = None

# Why: a step's projections are bound by reading their weights. At Qwen3-8B widths cuBLAS read them at 3.1 (q/k/v,
# 50 MB), 3.2 (o_proj, 34 MB, split over K with a second reduce kernel) and 3.6 TB/s (down_proj, 101 MB, the same)
# for one row, where gate/up (201 MB) and lm_head (1.2 GB) reach 4.1-4.2 and a device copy 4.2: ~0.5 ms of a 5.3 ms
# step over what the bytes need (the kernels of a replayed AR step, one H200, 2026-12-03, `gpu_suite.sh q8b_kernels`).
# A verify's 33-65 rows fare no better: 2.7-3.5 TB/s at Qwen3-8B, 3.0-3.75 at Qwen3.6-27B widths, 1.4 ms of a 27B
# verify (one H200, 2026-12-03, `python bench/bench_kernels.py --kinds proj --queries 1,33,65 [--proj-preset
# qwen3.6-27b]`).
HALF = (torch.bfloat16, torch.float16)
# At 65 rows (padded to 128) the few-row kernel lost to cuBLAS at every weight of Qwen3-8B and Qwen3.6-27B widths
# (1.1-1.9x its time; the same command and day), so past 64 rows nothing is tuned or timed
MAX_ROWS = 64


def rows(x: torch.Tensor, weight: torch.Tensor) -> int:
    """The rows of x a projection by `weight` multiplies."""
    return x.numel() // max(weight.shape[1], 1)


def bucket(m: int) -> int:
    """The rows the few-row kernel computes for m (a power of two, at least the 16 a tensor-core product needs):
    what it is compiled, tuned and chosen for, so a verify's 33 and 40 rows share one tuning."""
    return 1 if m == 1 else max(16, 1 << (m - 1).bit_length())


def eligible(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (triton is not None and x.is_cuda and x.shape[-1] == weight.shape[1] and 1 <= rows(x, weight) <= MAX_ROWS
            and x.dtype == weight.dtype and x.dtype in HALF and weight.stride(1) == 1)


if triton is not None:
    def _graph_bench(kernel_call, quantiles):
        """The autotuner's timing, in a CUDA graph as the steps replay it (per launch, Python's dispatch counts)."""
        return triton.testing.do_bench_cudagraph(kernel_call, rep=10, quantiles=quantiles)

    _CONFIGS = [triton.Config({"BN": bn, "BK": bk}, num_warps=w)
                for bn, bk, w in ((2, 1024, 4), (4, 512, 4), (4, 1024, 4), (8, 512, 4), (8, 256, 4), (16, 256, 8))]
    _ROW_CONFIGS = [triton.Config({"BN": bn, "BK": bk}, num_warps=w, num_stages=st)
                    for bn, bk, w, st in ((16, 256, 4, 4), (32, 128, 4, 4), (32, 256, 4, 3), (64, 128, 4, 4),
                                          (64, 64, 4, 6), (128, 64, 4, 4), (128, 128, 8, 3))]

    # Each program owns a few output columns and walks the whole input length in blocks, loading a [columns, block]
    # tile of the weight (contiguous along K: one coalesced, evict-first stream) and the matching block of x. One row
    # (`_gemv_fixed`): products accumulated in float32 and reduced once at the end. A few rows (`_rows_fixed`): the
    # rows padded to a power of two (at least 16) and a tensor-core product per block, pipelined over stages. No split
    # over K, so no second kernel and no partial sums through memory; the bias added and the result rounded once.
    @triton.jit
    def _gemv_fixed(x, w, b, out, N, K, stride_n, HAS_BIAS: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        cols = tl.program_id(0) * BN + tl.arange(0, BN)
        live = cols < N
        acc = tl.zeros([BN, BK], tl.float32)
        for start in range(0, K, BK):
            ks = start + tl.arange(0, BK)
            inside = ks < K
            xs = tl.load(x + ks, mask=inside, other=0.0).to(tl.float32)
            ws = tl.load(w + cols[:, None] * stride_n + ks[None, :], mask=live[:, None] & inside[None, :],
                         other=0.0, eviction_policy="evict_first")
            acc += ws.to(tl.float32) * xs[None, :]
        y = tl.sum(acc, 1)
        if HAS_BIAS:
            y += tl.load(b + cols, mask=live, other=0.0).to(tl.float32)
        tl.store(out + cols, y.to(out.dtype.element_ty), mask=live)

    @triton.jit
    def _rows_fixed(x, w, b, out, M, N, K, stride_n, HAS_BIAS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                    BK: tl.constexpr):
        cols = tl.program_id(0) * BN + tl.arange(0, BN)
        ms = tl.arange(0, BM)
        live, used = cols < N, ms < M
        acc = _rows_product(x, w, cols, ms, live, used, K, stride_n, 0, K, BM, BN, BK)
        if HAS_BIAS:
            acc += tl.load(b + cols, mask=live, other=0.0).to(tl.float32)[None, :]
        tl.store(out + ms[:, None] * N + cols[None, :], acc.to(out.dtype.element_ty),
                 mask=used[:, None] & live[None, :])

    # wrapped, leaving the fixed kernels as they are
    _gemv_tuned = triton.autotune(configs=_CONFIGS, key=["N", "K"], do_bench=_graph_bench)(_gemv_fixed)
    _rows_tuned = triton.autotune(configs=_ROW_CONFIGS, key=["N", "K", "BM"], do_bench=_graph_bench)(_rows_fixed)


def _launch(wrap, one, few, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, **fixed):
    n, k = weight.shape
    m = rows(x, weight)
    out = torch.empty(*x.shape[:-1], n, dtype=x.dtype, device=x.device)
    x = x.reshape(m, k).contiguous()
    grid = lambda meta: (triton.cdiv(n, meta["BN"]),)        # noqa: E731 - the autotuner's grid
    b = bias if bias is not None else x
    if m == 1:
        wrap(one)[grid](x, weight, b, out, n, k, weight.stride(0), HAS_BIAS=bias is not None, **fixed)
    else:
        wrap(few)[grid](x, weight, b, out, m, n, k, weight.stride(0), HAS_BIAS=bias is not None, BM=bucket(m),
                        **fixed)
    return out


if triton is not None:
    @torch.library.triton_op("ddtree::gemv", mutates_args=())
    def _op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return _launch(torch.library.wrap_triton, _gemv_tuned, _rows_tuned, x, weight, bias)


# (weight shape, dtype, bias, device, row bucket) -> what runs there: "kernel" (ours), "split" (remote.kernels.
# gemm_split, where on) or "cublas"
FASTER: dict[tuple, str] = {}


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """See the module docstring."""
    if eligible(x, weight) and not torch.compiler.is_compiling():     # traced whole (compile_steps): cuBLAS
        key = (tuple(weight.shape), weight.dtype, bias is not None, x.device, bucket(rows(x, weight)))
        if key not in FASTER and not torch.cuda.is_current_stream_capturing():
            FASTER[key] = _fastest(x, weight, bias)
        if FASTER.get(key) == "kernel":
            return _op(x, weight, bias)
        if FASTER.get(key) == "split":
            return gemm_split.split_linear(x, weight, bias)
    return F.linear(x, weight, bias)


def _fastest(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> str:
    """The kernel ("kernel", and for 2-64 rows remote.kernels.gemm_split's where it is on) that takes under 97% of
    cuBLAS's time for this shape on this GPU and the least of them, else "cublas": all timed as the steps run them,
    replayed in a CUDA graph (triton's do_bench_cudagraph), after the kernels' configurations are autotuned (a
    captured step's eager warm-up, never inside a capture). A GPU or shape where cuBLAS streams better keeps it."""
    # Timed per launch instead (do_bench), the kernel's Python dispatch counted and cuBLAS kept every shape, where in
    # graphs the kernel was faster at most (one H200, 2026-12-03, `gpu_suite.sh gemv`). In graphs the one-row kernel
    # read 4.2-4.6 TB/s where cuBLAS read 4.0-4.2 (gate/up, GDN in_proj, lm_head at Qwen3-8B and Qwen3.6-27B widths;
    # o_proj 3.3 against 3.0; q/k/v at Qwen3-8B 3.56 against 3.63: cuBLAS kept). At 33 rows the few-row kernel won
    # only for the GDN in_proj (27B, 3.95 against 3.83) and the 8B o_proj (3.37 against 3.00); the runners' choice
    # took it there and for lm_head at 16 rows, cuBLAS elsewhere: a 27B verify of 33 rows 0.36 ms faster, within the
    # runs' spread (one H200, 2026-12-03, `gpu_suite.sh q27b`).
    try:
        from triton.testing import do_bench_cudagraph

        ours = {"kernel": lambda: _op(x, weight, bias)}
        if gemm_split.ENABLED and rows(x, weight) > 1:
            ours["split"] = lambda: gemm_split.split_linear(x, weight, bias)
        times = {}
        for name, run in ours.items():
            run()                                # autotuned here, outside the capture
            times[name] = do_bench_cudagraph(run)
        best = min(times, key=times.get)
        return best if times[best] < 0.97 * do_bench_cudagraph(lambda: F.linear(x, weight, bias)) else "cublas"
    except Exception:                            # noqa: BLE001 - a timing that fails keeps cuBLAS, never the step
        return "cublas"


def gemv_interpreted(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, BN: int = 4,
                     BK: int = 64) -> torch.Tensor:
    """The kernels under Triton's interpreter (one fixed configuration), for tests."""
    return _launch(lambda kernel: kernel, _gemv_fixed, _rows_fixed, x, weight, bias, BN=BN, BK=BK)
