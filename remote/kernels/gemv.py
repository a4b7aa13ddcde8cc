"""A projection of one row (an AR step's) as one Triton kernel that streams the weight once, in place of cuBLAS.

Why: an AR step's projections are matrix-vector products, bound by reading their weights. At Qwen3-8B widths
cuBLAS read them at 3.1 (q/k/v, 50 MB), 3.2 (o_proj, 34 MB, split over K with a second reduce kernel) and 3.6 TB/s
(down_proj, 101 MB, the same), where gate/up (201 MB) and lm_head (1.2 GB) reach 4.1-4.2 and a device copy 4.2
(H200, the kernels of a replayed AR step, session 22): ~0.5 ms of a 5.3 ms step over what the bytes need.

How: each program owns a few output rows, walks the whole input length in blocks, loading a [rows, block] tile of
the weight (contiguous along K: one coalesced, evict-first stream) and the matching block of x, accumulating
products in float32 and reducing once at the end, then adds the bias and rounds to the output dtype. No split over
K, so no second kernel and no partial sums through memory. On first use of a weight shape (a captured step's eager
warm-up, never inside a capture) its configurations are autotuned, then it is timed against cuBLAS in a CUDA graph,
and the faster of the two serves that shape from then on: a GPU or shape where cuBLAS streams better keeps cuBLAS.
In graphs on the H200 the kernel read 4.2-4.6 TB/s where cuBLAS read 4.0-4.2 (gate/up, GDN in_proj, lm_head at
Qwen3-8B and Qwen3.6-27B widths; o_proj 3.3 against 3.0; q/k/v at Qwen3-8B 3.56 against 3.63: cuBLAS kept).

Contract: `linear(x, weight, bias)` equals `F.linear` up to float32 summation order for x of any leading shape; the
kernel runs only where it was built for (CUDA, Triton, one row: x.numel() == K, x and weight of one 16-bit dtype,
weight rows contiguous) and measured faster; everything else goes to `F.linear`. `gemv_interpreted` runs the kernel
under Triton's interpreter (TRITON_INTERPRET=1, CPU tensors) for tests. Under torch.compile the kernel is an opaque
op.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU-only installs: F.linear only
    triton = None

HALF = (torch.bfloat16, torch.float16)


def eligible(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (triton is not None and x.is_cuda and x.numel() == weight.shape[1] and x.dtype == weight.dtype
            and x.dtype in HALF and weight.stride(1) == 1)


if triton is not None:
    _CONFIGS = [triton.Config({"BN": bn, "BK": bk}, num_warps=w)
                for bn, bk, w in ((2, 1024, 4), (4, 512, 4), (4, 1024, 4), (8, 512, 4), (8, 256, 4), (16, 256, 8))]

    @triton.jit
    def _gemv_fixed(x, w, b, out, N, K, stride_n, HAS_BIAS: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rows = tl.program_id(0) * BN + tl.arange(0, BN)
        live = rows < N
        acc = tl.zeros([BN, BK], tl.float32)
        for start in range(0, K, BK):
            cols = start + tl.arange(0, BK)
            inside = cols < K
            xs = tl.load(x + cols, mask=inside, other=0.0).to(tl.float32)
            ws = tl.load(w + rows[:, None] * stride_n + cols[None, :], mask=live[:, None] & inside[None, :],
                         other=0.0, eviction_policy="evict_first")
            acc += ws.to(tl.float32) * xs[None, :]
        y = tl.sum(acc, 1)
        if HAS_BIAS:
            y += tl.load(b + rows, mask=live, other=0.0).to(tl.float32)
        tl.store(out + rows, y.to(out.dtype.element_ty), mask=live)

    _gemv_tuned = triton.autotune(configs=_CONFIGS, key=["N", "K"])(_gemv_fixed)   # wraps, leaves _gemv_fixed as is


def _launch(wrap, kernel, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, **fixed):
    n, k = weight.shape
    out = torch.empty(*x.shape[:-1], n, dtype=x.dtype, device=x.device)
    x = x.reshape(k) if x.is_contiguous() else x.reshape(k).contiguous()
    grid = lambda meta: (triton.cdiv(n, meta["BN"]),)        # noqa: E731 - the autotuner's grid
    wrap(kernel)[grid](x, weight, bias if bias is not None else x, out, n, k, weight.stride(0),
                       HAS_BIAS=bias is not None, **fixed)
    return out


if triton is not None:
    @torch.library.triton_op("ddtree::gemv", mutates_args=())
    def _op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return _launch(torch.library.wrap_triton, _gemv_tuned, x, weight, bias)


FASTER: dict[tuple, bool] = {}      # (weight shape, dtype, bias, device) -> whether the kernel beat cuBLAS there


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """See the module docstring."""
    if eligible(x, weight) and not torch.compiler.is_compiling():     # traced whole (compile_steps): cuBLAS
        key = (tuple(weight.shape), weight.dtype, bias is not None, x.device)
        if key not in FASTER and not torch.cuda.is_current_stream_capturing():
            FASTER[key] = _faster(x, weight, bias)
        if FASTER.get(key):
            return _op(x, weight, bias)
    return F.linear(x, weight, bias)


def _faster(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether the kernel takes under 97% of cuBLAS's time for this shape on this GPU, both timed as the steps run
    them: replayed in a CUDA graph (triton's do_bench_cudagraph). Timed per launch instead (do_bench), the kernel's
    Python dispatch counted and cuBLAS kept every shape, where in graphs the kernel was faster at most (session 22)."""
    try:
        from triton.testing import do_bench_cudagraph

        _op(x, weight, bias)                     # autotuned here, outside the capture
        ours = do_bench_cudagraph(lambda: _op(x, weight, bias))
        return ours < 0.97 * do_bench_cudagraph(lambda: F.linear(x, weight, bias))
    except Exception:                            # noqa: BLE001 - a timing that fails keeps cuBLAS, never the step
        return False


def gemv_interpreted(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, BN: int = 4,
                     BK: int = 64) -> torch.Tensor:
    """The kernel under Triton's interpreter (one fixed configuration), for tests."""
    return _launch(lambda kernel: kernel, _gemv_fixed, x, weight, bias, BN=BN, BK=BK)
