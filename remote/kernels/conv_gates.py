"""A GDN layer's causal conv over N windows, its activation and the gates, in one Triton launch (CUDA): what
remote.models.gdn.conv_gates computes in torch ops, which torch.compile turns into three kernels a layer.

Contract: `conv_gates(bank, index, weight, bias, b, a, a_log, dt_bias, shape, activation)` returns what
remote.models.gdn.conv_gates returns (q, k [1, N, HV, Dk] repeated to the value heads, v [1, N, HV, Dv] in bank's
dtype; g [1, N, HV] float32; beta [1, N, HV] in b's dtype), as contiguous tensors: bank [C, M] (unit column stride),
index [N, K] long (None: one window, the last K columns), weight [C, K], bias [C] or None, b, a [1, N, HV] (unit
last stride), activation "silu" or None. Window sums are float32 in tap order and rounded once to bank's dtype:
results agree with the torch ops to float32 rounding (sums in another order, silu and softplus by other formulas).
`usable(...)` (the same arguments) says whether it runs: CUDA with Triton, `ENABLED`, at most MAX_WINDOWS windows,
the layouts above.
"""
from __future__ import annotations

import torch

from . import on_device, pow2

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU-only installs: the torch ops
    triton = None

# Why: torch.compile makes this three kernels a layer (the conv, g, beta: ~1.5 + 1.2 + 1.0 us at the demo's 16-node
# verify, each also a gap in the captured step), and a compile for a second shape is a dynamic one whose tiling served
# later captures at 6.7 us a layer (grid [1, 3]: three CTAs for 768 channels x 16 nodes; one H200, 2026-12-04,
# `python3 bench/bench_methods.py $Q35 --temperatures 0 --num-prompts 6 --budgets 15,31 --timeline DIR`). Here
# program (node, channel block) sums its block of the node's windows, and one more program per node computes the
# gates, whatever the shapes compiled before: 1.6 / 2.2 / 2.7 / 3.5 us at 1 / 16 / 32 / 64 windows at the demo's
# widths against the compiled ops' 3.5 / 4.0 / 7.7 / 5.7; at Qwen3.6-27B widths 2.2 / 3.6 / 8.0 us against 6.1 /
# 12.8 / 13.2 up to 32 windows, but 16.6 against 10.5 at 64 (likely its loads: a program's channels are rows of the
# bank, strided); one H200, 2026-12-05, `python3 bench/bench_kernels.py --kinds conv [--gdn-preset qwen3.6-27b]`.
ENABLED = True
MAX_WINDOWS = 33    # measured faster up to 32 (both widths) and slower at 64 (27B widths); 33: a budget-32 verify
BLOCK_C = 256       # channels a program sums


def usable(bank, index, weight, bias, b, a, a_log, dt_bias, shape, activation) -> bool:
    """Whether `conv_gates(...)` of these arguments runs the kernel."""
    windows = 1 if index is None else index.shape[0]
    return (ENABLED and triton is not None and bank.is_cuda and windows <= MAX_WINDOWS
            and activation in ("silu", "swish", None)
            and bank.stride(1) == 1 and weight.is_contiguous() and b.stride(-1) == 1 and a.stride(-1) == 1
            and (index is None or index.is_contiguous()))


if triton is not None:
    @triton.jit
    def _conv_gates_kernel(bank, index, weight, bias, b, a, a_log, dt_bias, q, k, v, g, beta, M, bank_row, KEY, VAL,
                           DK, HV, REP, b_node, a_node, K: tl.constexpr, BC: tl.constexpr, HVP: tl.constexpr,
                           HAS_INDEX: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr):
        n, block = tl.program_id(0).to(tl.int64), tl.program_id(1)
        C = 2 * KEY + VAL
        if block * BC < C:
            c = block * BC + tl.arange(0, BC)
            live = c < C
            acc = tl.zeros([BC], tl.float32)
            for j in tl.static_range(K):
                col = tl.load(index + n * K + j) if HAS_INDEX else M - K + j
                x = tl.load(bank + c * bank_row + col, mask=live, other=0.0).to(tl.float32)
                acc += x * tl.load(weight + c * K + j, mask=live, other=0.0).to(tl.float32)
            if HAS_BIAS:
                acc += tl.load(bias + c, mask=live, other=0.0).to(tl.float32)
            if SILU:
                acc = acc * tl.sigmoid(acc)
            out = acc.to(v.dtype.element_ty)
            # q and k: key head c // DK of their part, each stored to its REP value heads
            part = c // KEY
            within = c - part * KEY
            head, d = within // DK, within % DK
            for r in range(REP):
                at = (n * HV + head * REP + r) * DK + d
                tl.store(q + at, out, mask=live & (part == 0))
                tl.store(k + at, out, mask=live & (part == 1))
            tl.store(v + n * VAL + (c - 2 * KEY), out, mask=live & (c >= 2 * KEY))
        else:
            h = tl.arange(0, HVP)
            heads = h < HV
            bb = tl.load(b + n * b_node + h, mask=heads, other=0.0)
            tl.store(beta + n * HV + h, tl.sigmoid(bb.to(tl.float32)).to(bb.dtype), mask=heads)
            pre = tl.load(a + n * a_node + h, mask=heads, other=0.0).to(tl.float32) + \
                tl.load(dt_bias + h, mask=heads, other=0.0).to(tl.float32)
            softplus = tl.where(pre > 20.0, pre, tl.log(1.0 + tl.exp(tl.minimum(pre, 20.0))))   # torch's threshold
            decay = tl.exp(tl.load(a_log + h, mask=heads, other=0.0).to(tl.float32))
            tl.store(g + n * HV + h, -decay * softplus, mask=heads)


def _launch(wrap, bank, index, weight, bias, b, a, a_log, dt_bias, shape, activation):
    """Allocate and run; `wrap` is torch.library.wrap_triton inside the op, identity under the interpreter."""
    key_dim, value_dim, head_k, head_v, rep = shape
    channels, width = bank.shape
    kernel = weight.shape[-1]
    n = 1 if index is None else index.shape[0]
    hv = b.shape[-1]
    q = bank.new_empty(1, n, hv, head_k)
    k = torch.empty_like(q)
    v = bank.new_empty(1, n, hv, head_v)
    g = torch.empty(1, n, hv, dtype=torch.float32, device=bank.device)
    beta = b.new_empty(1, n, hv)
    blocks = triton.cdiv(channels, BLOCK_C)
    with on_device(bank):
        wrap(_conv_gates_kernel)[(n, blocks + 1)](
            bank, bank if index is None else index, weight, weight if bias is None else bias, b, a, a_log, dt_bias,
            q, k, v, g, beta, width, bank.stride(0), key_dim, value_dim, head_k, hv, rep,
            b.stride(-2), a.stride(-2), K=kernel, BC=BLOCK_C, HVP=pow2(hv), HAS_INDEX=index is not None,
            HAS_BIAS=bias is not None, SILU=activation is not None, num_warps=4)
    return q, k, v, g, beta


if triton is not None:
    @torch.library.triton_op("ddtree::conv_gates", mutates_args=())
    def _op(bank: torch.Tensor, index: torch.Tensor | None, weight: torch.Tensor, bias: torch.Tensor | None,
            b: torch.Tensor, a: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor, shape: list[int],
            silu: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return _launch(torch.library.wrap_triton, bank, index, weight, bias, b, a, a_log, dt_bias, tuple(shape),
                       "silu" if silu else None)


def conv_gates(bank, index, weight, bias, b, a, a_log, dt_bias, shape, activation):
    """The kernel (callers check `usable` first)."""
    return _op(bank, index, weight, bias, b, a, a_log, dt_bias, list(shape), activation is not None)


def conv_gates_interpreted(bank, index, weight, bias, b, a, a_log, dt_bias, shape, activation):
    """The kernel under Triton's interpreter (TRITON_INTERPRET=1) on CPU tensors, for tests."""
    return _launch(lambda kernel: kernel, bank, index, weight, bias, b, a, a_log, dt_bias, shape, activation)
