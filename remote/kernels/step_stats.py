"""A verify step's `StepStats` (remote.decoding.loop.miss_stats) in two Triton kernels (CUDA).

Why: in torch ops they are ~25 tiny kernels (index_select, gather, compare, sum, arange, where, any, argmax, cat,
...), ~2 us each inside a CUDA graph: ~45 us of a step on an H200 (the demo step's commit phase went from 0.055 to
0.100 ms when they came in). Here program (row, chunk) of the first kernel counts the drafter's logits in its chunk
of the row that beat the target's token, and one program of the second sums a row's counts into its rank and
writes the four stats. Counts are integers, so the result does not depend on the order of the sums.

Contract: `miss_stats(samples, path, accepted, draft_logits)` -> [4] long on the draft logits' device, equal to
`torch_miss_stats` (the definition, in torch ops: the CPU path and the reference the kernels are tested against) for
draft logits of any float dtype. The kernels compare in float32: promoting both sides of a comparison from
bf16 / fp16 is exact, so every comparison (NaN included: never greater, never beaten) comes out as in the logits'
own dtype; a sample of -1 (outside a reduced draft vocabulary) ranks after every finite logit. Rows: min(len(path),
len(draft_logits)), at least 1. `available(device)`: whether they can run; under torch.compile one opaque op.
"""
from __future__ import annotations

import torch

from . import pow2

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU-only installs: the torch ops
    triton = None

CHUNK = 4096    # vocabulary entries a counting program reads: 38 chunks a row at Qwen's 151936, 1 at the demo's 4096


def available(device: torch.device) -> bool:
    return triton is not None and device.type == "cuda"


def torch_miss_stats(samples: torch.Tensor, path: torch.Tensor, accepted: torch.Tensor,
                     draft_logits: torch.Tensor) -> torch.Tensor:
    """The definition (remote.decoding.loop.miss_stats' docstring), in torch ops."""
    rows = min(path.shape[0], draft_logits.shape[0])
    logits = draft_logits[:rows]                                                             # [R, V]
    chosen = samples.index_select(0, path[:rows]).to(logits.device)                          # [R]
    pivot = logits.gather(1, chosen.clamp(min=0)[:, None])                                   # [R, 1]
    pivot = torch.where(chosen[:, None] >= 0, pivot, float("-inf"))      # -1: outside a reduced draft vocabulary
    rank = (logits > pivot).sum(dim=1) + 1                                                   # [R]
    depth = torch.arange(rows, device=logits.device)                                         # [R]: depth - 1
    accepted = accepted.to(logits.device)
    missed = ((depth < accepted) & (rank != 1)) | (depth == accepted)                       # [R]
    found = missed.any().long()
    first = missed.long().argmax().view(1)                                                   # first missed (or 0)
    rows_verified = torch.full((1,), samples.shape[0], dtype=torch.long, device=logits.device)
    return torch.cat([rows_verified, (first + 1) * found, rank.index_select(0, first) * found,
                      (first < accepted).long() * found])


if triton is not None:
    @triton.jit
    def _count_kernel(logits, stride, samples, path, counts, V, chunks, CHUNK: tl.constexpr):
        """Program (row, chunk): how many of the chunk's logits beat the target's token at the row's path node."""
        row, chunk = tl.program_id(0), tl.program_id(1)
        token = tl.load(samples + tl.load(path + row))
        start = logits + row.to(tl.int64) * stride
        pivot = tl.load(start + tl.maximum(token, 0)).to(tl.float32)
        pivot = tl.where(token >= 0, pivot, float("-inf"))       # -1: outside a reduced draft vocabulary
        i = chunk * CHUNK + tl.arange(0, CHUNK)
        x = tl.load(start + i, mask=i < V, other=float("-inf")).to(tl.float32)   # -inf beats nothing
        tl.store(counts + row * chunks + chunk, tl.sum((x > pivot).to(tl.int32), 0))

    @triton.jit
    def _stats_kernel(counts, accepted, out, rows, chunks, nodes, RP: tl.constexpr, CP: tl.constexpr):
        """One program: the ranks, the first missed depth and the four stats (`torch_miss_stats`)."""
        r = tl.arange(0, RP)
        c = tl.arange(0, CP)
        live = r < rows
        beaten = tl.load(counts + r[:, None] * chunks + c[None, :], mask=live[:, None] & (c[None, :] < chunks),
                         other=0)
        rank = tl.sum(beaten, 1).to(tl.int64) + 1                                          # [RP]
        acc = tl.load(accepted)
        missed = live & (((r < acc) & (rank != 1)) | (r == acc))
        first = tl.min(tl.where(missed, r, RP), 0)
        found = (first < RP).to(tl.int64)
        first = tl.where(first < RP, first, 0)
        rank_first = tl.sum(tl.where(r == first, rank, 0), 0)
        k = tl.arange(0, 4)                                      # StepStats' fields, in order
        stats = tl.where(k == 2, rank_first * found, (first < acc).to(tl.int64) * found)
        stats = tl.where(k == 0, nodes, tl.where(k == 1, (first + 1) * found, stats))
        tl.store(out + k, stats.to(tl.int64))


def _launch(wrap, samples, path, accepted, logits, rows: int, chunk: int = CHUNK) -> torch.Tensor:
    """Allocate and run; `wrap` is torch.library.wrap_triton inside the op, identity under the interpreter."""
    vocab = logits.shape[1]
    chunks = -(-vocab // chunk)
    counts = torch.empty(rows, chunks, dtype=torch.int32, device=logits.device)
    out = torch.empty(4, dtype=torch.long, device=logits.device)
    wrap(_count_kernel)[(rows, chunks)](logits, logits.stride(0), samples, path, counts, vocab, chunks,
                                        CHUNK=chunk, num_warps=4)
    wrap(_stats_kernel)[(1,)](counts, accepted, out, rows, chunks, samples.shape[0], RP=pow2(rows),
                              CP=pow2(chunks), num_warps=1)
    return out


if triton is not None:
    @torch.library.triton_op("ddtree::miss_stats", mutates_args=())
    def _op(samples: torch.Tensor, path: torch.Tensor, accepted: torch.Tensor, logits: torch.Tensor,
            rows: int) -> torch.Tensor:
        return _launch(torch.library.wrap_triton, samples, path, accepted, logits, rows)


def _operands(samples, path, accepted, draft_logits):
    """The kernels' inputs on the logits' device, the logits with unit column stride; and the row count."""
    device = draft_logits.device
    rows = min(path.shape[0], draft_logits.shape[0])
    logits = draft_logits if draft_logits.stride(1) == 1 else draft_logits.contiguous()
    return samples.to(device), path.to(device), accepted.to(device), logits, rows


def miss_stats(samples: torch.Tensor, path: torch.Tensor, accepted: torch.Tensor,
               draft_logits: torch.Tensor) -> torch.Tensor:
    """The kernels where they can run, else `torch_miss_stats`."""
    if not available(draft_logits.device):
        return torch_miss_stats(samples, path, accepted, draft_logits)
    return _op(*_operands(samples, path, accepted, draft_logits))


def miss_stats_interpreted(samples, path, accepted, draft_logits, chunk: int = CHUNK) -> torch.Tensor:
    """The kernels without the op wrapper, under Triton's interpreter (TRITON_INTERPRET=1) on CPU tensors, for
    tests (a small `chunk` makes several chunks a row)."""
    return _launch(lambda kernel: kernel, *_operands(samples, path, accepted, draft_logits), chunk)
