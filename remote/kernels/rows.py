"""A commit's row moves in one Triton launch (CUDA): the accepted path's K/V rows of every layer moved to the front of
the verify's window, and the accepted nodes' drafter features gathered into the next step's context.

Contract: `gather_rows(src, src_start, path, dst, dst_start)` sets dst[..., dst_start + i, :] =
src[..., src_start + path[i], :] for every i, as if every row were read before any is written (src may be dst).
src / dst: [..., R, D] with the same leading dims (flattened to slabs), unit column stride and slabs at a fixed
stride; path [H] long on their device; each start a host int or a device scalar (long), so a captured step moves
rows without a host value. `src` may also be taps, a tuple of k tensors [R, D] (`Verified.taps`): their rows are
moved as the rows of their concatenation [R, k * D] would be, into dst [R', k * D], without that copy. Off CUDA (or
without Triton) the torch ops do the same (`torch_gather_rows`, the reference the kernel is tested against), and so
do more than MAX_ROWS rows or MAX_TAPS taps. torch.compile leaves it out of its graphs (a graph break).
"""
from __future__ import annotations

import torch

from . import on_device, pow2

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU-only installs: the torch ops
    triton = None

TILE = 4096        # elements a program holds (rows x columns): 16 rows x 256 columns
MAX_ROWS = 64      # rows one program holds (a step's at most); a prompt's more go through the torch ops
MAX_TAPS = 8       # taps one launch moves (a DFlash drafter reads one a drafter layer: 5 for Qwen3-8B's); more: torch ops


def available(device: torch.device) -> bool:
    return triton is not None and device.type == "cuda"


def torch_gather_rows(src: torch.Tensor | tuple, src_start, path: torch.Tensor, dst: torch.Tensor, dst_start) -> None:
    """The definition, in torch ops (all rows read, then written)."""
    src = torch.cat(src, dim=-1) if isinstance(src, tuple) else src
    rows = src.index_select(-2, src_start + path)
    dst.index_copy_(dst.dim() - 2, dst_start + torch.arange(path.shape[0], device=path.device), rows)


# Why: `index_select` + `index_copy_` are two launches a store and PyTorch's small-index select is slow at these
# shapes (8.1 us for 16 rows of the demo target's 12 K and V tensors, 7.9 us for 16 feature rows, inside a CUDA graph:
# a demo-qwen3 DDTree 31 commit took 53 us in 25 launches; one H200, 2026-12-04, `gpu_suite.sh q3_kernels`). Here
# program (slab, column block) loads the block's rows of its slab, waits for every thread of the program, then stores
# them: reads precede writes within the only program that touches those addresses, so a move within one tensor
# (source rows after the destination rows, overlapping) is safe in place. The demo's commit 53 -> 16 us, the two moves
# 2.7 us together (the same day, `python3 bench/bench_methods.py $Q3 --num-prompts 4 --budgets 31 --phase-kernels`).
# Taps: the drafter's features were the taps concatenated (a copy kernel) and then moved; tree_budget=auto's AR step
# on demo-qwen3 spent 1.4 us of its 185.6 on that concatenation, against AR's whole step of 179.4 (one H100,
# 2026-12-07, `gpu_suite.sh q3_auto_timeline`, bench/step_timeline.py's kinds).
if triton is not None:
    @triton.jit(do_not_specialize=["src_off", "dst_off"])    # host starts change every step: one compile
    def _gather_rows_kernel(src, tap1, tap2, tap3, tap4, tap5, tap6, tap7, dst, path, src_base, dst_base, src_off,
                            dst_off, H, D, src_slab, src_row, dst_slab, dst_row, HP: tl.constexpr, BD: tl.constexpr,
                            SRC_PTR: tl.constexpr, DST_PTR: tl.constexpr, TAPS: tl.constexpr):
        slab, block = tl.program_id(0).to(tl.int64), tl.program_id(1)
        i = tl.arange(0, HP)
        c = block * BD + tl.arange(0, BD)
        live = i < H
        first = src_off + (tl.load(src_base) if SRC_PTR else 0)
        at = dst_off + (tl.load(dst_base) if DST_PTR else 0)
        rows = first + tl.load(path + i, mask=live, other=0)
        keep = live[:, None] & (c[None, :] < D)
        read = slab * src_slab + rows[:, None].to(tl.int64) * src_row + c[None, :]
        write = dst + slab * dst_slab + (at + i)[:, None].to(tl.int64) * dst_row + c[None, :]
        x = tl.load(src + read, mask=keep)
        if TAPS == 1:
            tl.debug_barrier()      # every thread's reads before any write: source and destination may overlap
        tl.store(write, x, mask=keep)
        for j in tl.static_range(1, TAPS):         # taps are fresh tensors: never the destination
            tap = tap1
            if j == 2:
                tap = tap2
            if j == 3:
                tap = tap3
            if j == 4:
                tap = tap4
            if j == 5:
                tap = tap5
            if j == 6:
                tap = tap6
            if j == 7:
                tap = tap7
            tl.store(write + j * D, tl.load(tap + read, mask=keep), mask=keep)


def _slabs(t: torch.Tensor) -> torch.Tensor | None:
    """`t` [..., R, D] as [S, R, D] (a view), or None where its layout cannot be one."""
    if t.stride(-1) != 1:
        return None
    try:
        return t.view(-1, t.shape[-2], t.shape[-1])
    except RuntimeError:
        return None


def _start(start) -> tuple[torch.Tensor | None, int]:
    """A start as (device scalar or None, host offset)."""
    return (start, 0) if isinstance(start, torch.Tensor) else (None, int(start))


def _launch(taps: list[torch.Tensor], src_start, path: torch.Tensor, d: torch.Tensor, dst_start) -> None:
    """The kernel on source and destination slabs [S, R, D] (`_slabs`); with taps, the destination's columns hold
    theirs in turn."""
    (src_base, src_off), (dst_base, dst_off) = _start(src_start), _start(dst_start)
    s = taps[0]
    height, cols = path.shape[0], s.shape[2]
    hp = pow2(height)
    bd = min(pow2(cols), max(16, TILE // hp))
    # a host start passes `path` where its device scalar would go: the kernel reads that pointer only with its flag
    with on_device(d):
        _gather_rows_kernel[(s.shape[0], triton.cdiv(cols, bd))](
            *taps, *[s] * (MAX_TAPS - len(taps)), d, path, path if src_base is None else src_base,
            path if dst_base is None else dst_base, src_off, dst_off, height, cols, s.stride(0), s.stride(1),
            d.stride(0), d.stride(1), HP=hp, BD=bd, SRC_PTR=src_base is not None, DST_PTR=dst_base is not None,
            TAPS=len(taps), num_warps=4)


@torch.compiler.disable     # a move within one tensor is not something to functionalize: always this launch
def gather_rows(src: torch.Tensor | tuple, src_start, path: torch.Tensor, dst: torch.Tensor, dst_start) -> None:
    """The kernel where it can run, else `torch_gather_rows`."""
    s, d = (_sources(src), _slabs(dst)) if available(dst.device) and 0 < path.shape[0] <= MAX_ROWS else (None, None)
    if s is None or d is None:
        return torch_gather_rows(src, src_start, path, dst, dst_start)
    return _launch(s, src_start, path, d, dst_start)


def gather_rows_interpreted(src, src_start, path, dst, dst_start) -> None:
    """The kernel under Triton's interpreter (TRITON_INTERPRET=1) on CPU tensors, for tests."""
    _launch(_sources(src), src_start, path, _slabs(dst), dst_start)


def _sources(src: torch.Tensor | tuple) -> list[torch.Tensor] | None:
    """`src`, or each of its taps, as slabs (`_slabs`), or None where one launch cannot read them all: taps of one
    shape and layout, at most MAX_TAPS."""
    taps = list(src) if isinstance(src, tuple) else [src]
    slabs = [_slabs(t) for t in taps]
    if not 0 < len(slabs) <= MAX_TAPS or any(s is None for s in slabs):
        return None
    first = slabs[0]
    if any(s.shape != first.shape or s.stride() != first.stride() for s in slabs):
        return None
    return slabs
