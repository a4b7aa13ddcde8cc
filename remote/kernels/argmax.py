"""The greedy token of every row of a step's logits in one or two Triton launches (CUDA).

Contract: `argmax_rows(logits)` equals `logits.argmax(dim=-1)` ([N, V] of any float dtype -> [N] long): the first
index of the row's maximum, a NaN counting as above every number (the first NaN wins, as in torch). The kernels
compare in float32, which every bf16 / fp16 value is exactly. Off CUDA, under torch.compile (inductor fuses its own)
or without Triton it is `argmax` itself; `argmax_rows_interpreted` runs the kernels under Triton's interpreter for
tests.
"""
from __future__ import annotations

import torch

from . import on_device, pow2

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU-only installs: torch's argmax
    triton = None

# Why: PyTorch's argmax reduction serves a verify's few rows badly: 15.4 us for the demo target's 32 x 4096 float32
# logits inside a CUDA graph (3.7 us for AR's one row), 17.1 us at Qwen's vocabulary for 33 rows (one H200,
# 2026-12-04, `gpu_suite.sh q3_kernels q27b_kernels`). Here program (row, chunk) reduces its chunk of a row and, where a
# row is one chunk (the demo's 4096), writes the token itself; longer rows (Qwen's 151936: 38 chunks) leave each
# chunk's best for one program a row to merge. The demo's 32 rows then take 2.0 us (the same day, `python3
# bench/bench_methods.py $Q3 --num-prompts 4 --budgets 31 --phase-kernels`).
CHUNK = 4096      # entries a program reduces


def available(device: torch.device) -> bool:
    return triton is not None and device.type == "cuda"


if triton is not None:
    @triton.jit
    def _chunk_kernel(logits, stride, best, where, out, V, chunks, CHUNK: tl.constexpr, DIRECT: tl.constexpr):
        """Program (row, chunk): the chunk's first maximum (value, index); a NaN is +inf there, found first."""
        row, chunk = tl.program_id(0), tl.program_id(1)
        i = chunk * CHUNK + tl.arange(0, CHUNK)
        x = tl.load(logits + row.to(tl.int64) * stride + i, mask=i < V, other=float("-inf")).to(tl.float32)
        nan = x != x
        first_nan = tl.min(tl.where(nan, i, V), 0)
        x = tl.where(nan, float("inf"), x)
        top = tl.max(x, 0)
        first_top = tl.min(tl.where(x == top, i, V), 0)
        index = tl.where(first_nan < V, first_nan, first_top)
        if DIRECT:
            tl.store(out + row, index.to(tl.int64))
        else:
            tl.store(best + row * chunks + chunk, tl.where(first_nan < V, float("nan"), top))
            tl.store(where + row * chunks + chunk, index)

    @triton.jit
    def _merge_kernel(best, where, out, chunks, V, CP: tl.constexpr):
        """Program row: the first chunk holding a NaN, else the first chunk holding the row's maximum."""
        row = tl.program_id(0)
        c = tl.arange(0, CP)
        live = c < chunks
        x = tl.load(best + row * chunks + c, mask=live, other=float("-inf"))
        at = tl.load(where + row * chunks + c, mask=live, other=0)
        nan = live & (x != x)
        x = tl.where(nan, float("inf"), x)
        top = tl.max(x, 0)
        pick = tl.where(tl.max(nan.to(tl.int32), 0) > 0, nan, live & (x == top))
        tl.store(out + row, tl.min(tl.where(pick, at, V), 0).to(tl.int64))


def _launch(logits: torch.Tensor, chunk: int = CHUNK) -> torch.Tensor:
    rows, vocab = logits.shape
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    chunks = -(-vocab // chunk)
    out = torch.empty(rows, dtype=torch.long, device=logits.device)
    best = torch.empty(rows * chunks if chunks > 1 else 1, dtype=torch.float32, device=logits.device)
    where = torch.empty(best.shape, dtype=torch.int32, device=logits.device)
    with on_device(logits):
        _chunk_kernel[(rows, chunks)](logits, logits.stride(0), best, where, out, vocab, chunks, CHUNK=chunk,
                                      DIRECT=chunks == 1, num_warps=4)
        if chunks > 1:
            _merge_kernel[(rows,)](best, where, out, chunks, vocab, CP=pow2(chunks), num_warps=1)
    return out


def argmax_rows(logits: torch.Tensor) -> torch.Tensor:
    """logits [N, V] -> [N] long, the kernels where they serve."""
    if not available(logits.device) or torch.compiler.is_compiling() or logits.shape[0] == 0:
        return logits.argmax(dim=-1)
    return _launch(logits)


def argmax_rows_interpreted(logits: torch.Tensor, chunk: int = CHUNK) -> torch.Tensor:
    """The kernels under Triton's interpreter (TRITON_INTERPRET=1) on CPU tensors, for tests (a small `chunk`
    makes several chunks a row)."""
    return _launch(logits, chunk)
