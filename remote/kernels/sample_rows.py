"""Temperature sampling of every row of a step's logits in two Triton launches (CUDA): the inverse CDF of
remote.decoding.sampling without its vocabulary-wide intermediates.

Contract: `sample_rows(logits [N, V], temperature, u [N])` -> [N] long: per row the token k with
cum[k-1] <= u * cum[V-1] < cum[k], cum the cumulative sum of exp(logits / T - max), up to float32 rounding: the
distribution of the torch path, though a draw that lands within rounding of a boundary may take the neighbour. A token
of probability 0 (underflowed, or -inf) is never chosen. `sample_rows_interpreted` runs the kernels under Triton's
interpreter on CPU tensors (tests; a small `chunk` makes several chunks a row).
"""
from __future__ import annotations

import torch

from . import on_device, pow2

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU-only installs: the torch path of remote.decoding.sampling
    triton = None

# Why: torch's division, softmax, cumulative sum over the whole vocabulary and searchsorted were ~30 us a step inside
# a CUDA graph (demo-qwen3's AR at T=1 took 0.219 ms a token against 0.188 at T=0, 1.17x, and every method paid the
# same ~0.03 ms a step; one H200, 2026-12-05, `gpu_suite.sh q3_temp`), mostly one-row scans of the vocabulary. Here
# program (row, chunk) writes its chunk's maximum and mass (the sum of exp(x / T - maximum)); program row puts the
# chunks' masses on one scale, finds the chunk where u * total falls and scans that chunk alone.
CHUNK = 4096      # entries a program reads
# remote.decoding.sampling's switch between this and the torch ops: on since its CUDA test passed on an H100 and
# it took AR's replayed T=1 forward from 1.08x to 1.05x its T=0 one there (one H100, 2026-12-05, `gpu_suite.sh tests
# q3_temp`, the sampler off in the tree and on in BASE)
ENABLED = True


def available(device: torch.device) -> bool:
    return triton is not None and device.type == "cuda"


if triton is not None:
    @triton.jit
    def _scaled(logits, stride, row, i, V, temperature):
        x = tl.load(logits + row.to(tl.int64) * stride + i, mask=i < V, other=float("-inf"))
        return x.to(tl.float32) / temperature

    @triton.jit
    def _chunk_kernel(logits, stride, temperature, top, mass, V, chunks, CHUNK: tl.constexpr):
        """Program (row, chunk): the chunk's maximum and its mass on that maximum's scale (0 for a chunk of -inf)."""
        row, chunk = tl.program_id(0), tl.program_id(1)
        x = _scaled(logits, stride, row, chunk * CHUNK + tl.arange(0, CHUNK), V, temperature)
        m = tl.max(x, 0)
        s = tl.where(m == float("-inf"), 0.0, tl.sum(tl.exp(x - m), 0))
        tl.store(top + row * chunks + chunk, m)
        tl.store(mass + row * chunks + chunk, s)

    @triton.jit
    def _pick_kernel(logits, stride, temperature, top, mass, u, out, V, chunks, CHUNK: tl.constexpr,
                     CP: tl.constexpr):
        """Program row: the chunk where u * total falls, then the token within it. Rounding that carries the
        target past the last chunk or token with mass takes that last one instead."""
        row = tl.program_id(0)
        c = tl.arange(0, CP)
        m = tl.load(top + row * chunks + c, mask=c < chunks, other=float("-inf"))
        s = tl.load(mass + row * chunks + c, mask=c < chunks, other=0.0)
        peak = tl.max(m, 0)
        w = tl.where(s > 0, s * tl.exp(m - peak), 0.0)
        target = tl.load(u + row) * tl.sum(w, 0)
        pick = tl.minimum(tl.sum((tl.cumsum(w, 0) <= target).to(tl.int32), 0), tl.max(tl.where(w > 0, c, 0), 0))
        rest = target - tl.sum(tl.where(c < pick, w, 0.0), 0)
        j = tl.arange(0, CHUNK)
        p = tl.exp(_scaled(logits, stride, row, pick * CHUNK + j, V, temperature) - peak)
        k = tl.minimum(tl.sum((tl.cumsum(p, 0) <= rest).to(tl.int32), 0), tl.max(tl.where(p > 0, j, 0), 0))
        tl.store(out + row, (pick * CHUNK + k).to(tl.int64))


def _launch(logits: torch.Tensor, temperature: float, u: torch.Tensor, chunk: int = CHUNK) -> torch.Tensor:
    rows, vocab = logits.shape
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    chunks = -(-vocab // chunk)
    out = torch.empty(rows, dtype=torch.long, device=logits.device)
    top = torch.empty(rows * chunks, dtype=torch.float32, device=logits.device)
    mass = torch.empty_like(top)
    u = u.reshape(rows).float()
    with on_device(logits):
        _chunk_kernel[(rows, chunks)](logits, logits.stride(0), float(temperature), top, mass, vocab, chunks,
                                      CHUNK=chunk, num_warps=4)
        _pick_kernel[(rows,)](logits, logits.stride(0), float(temperature), top, mass, u, out, vocab, chunks,
                              CHUNK=chunk, CP=pow2(chunks), num_warps=4)
    return out


def sample_rows(logits: torch.Tensor, temperature: float, u: torch.Tensor) -> torch.Tensor:
    """logits [N, V] (any float dtype, on CUDA), u [N] or [N, 1] uniform in [0, 1) -> [N] long."""
    return _launch(logits, temperature, u)


def sample_rows_interpreted(logits: torch.Tensor, temperature: float, u: torch.Tensor,
                            chunk: int = CHUNK) -> torch.Tensor:
    """The kernels under Triton's interpreter (TRITON_INTERPRET=1) on CPU tensors, for tests."""
    return _launch(logits, temperature, u, chunk)
