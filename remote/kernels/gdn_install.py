"""A DDTree commit's GDN install in one Triton launch (CUDA): for every layer of a device's stack
(remote.models.gdn_stack), the accepted node's conv window gathered from the verify's bank and its kept recurrent
state copied into the committed state.

Why: in torch ops this is three launches whatever the layer count (the window's bank columns, the conv gather, the
recurrent gather): 6.9 us of kernel time in the demo hybrid's 21.8-us DDTree 15 commit (H200, bench_methods
--phase-kernels, session 29), each also a gap in the captured step. Here program (layer, block) reads the node index
and the window's columns itself and copies its block of both states: 2.0 us, the commit 16.2 us in 11 launches
(session 30, call 3), and the hybrid's DDTree 15 / DFlash 1.227x / 1.265x -> 1.272x / 1.297x in one call's
interleaved runs.

Contract: `install(bank, nodes, conv_index, last, conv, rec)` sets, for every layer g, conv[g, :, j] =
bank[g, :, conv_index[last, j]] and rec[g] = nodes[g, last]: bank [G, C, K + N], nodes [G, N, ...] float32,
conv_index [N, K] long (remote.models.gdn.TreeLayout), last [1] long on their device, conv [G, C, K] (bank's dtype)
and rec [G, ...] (nodes' trailing shape) written in place. Off CUDA, without Triton or with a non-contiguous tensor
the torch ops do the same (`torch_install`, the reference the kernel is tested against). torch.compile leaves it out
of its graphs (a graph break).
"""
from __future__ import annotations

import torch

from . import on_device

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU-only installs: the torch ops
    triton = None

BLOCK = 1024       # elements of each state a program copies


def torch_install(bank, nodes, conv_index, last, conv, rec) -> None:
    """The definition, in torch ops."""
    torch.index_select(bank, 2, conv_index.index_select(0, last)[0], out=conv)
    torch.index_select(nodes, 1, last, out=rec.unsqueeze(1))


if triton is not None:
    @triton.jit
    def _install_kernel(bank, nodes, conv_index, last, conv, rec, C, K, width, N, R, BLOCK: tl.constexpr):
        g, block = tl.program_id(0).to(tl.int64), tl.program_id(1)
        node = tl.load(last)
        e = block * BLOCK + tl.arange(0, BLOCK)
        state = e < R
        tl.store(rec + g * R + e, tl.load(nodes + (g * N + node) * R + e, mask=state), mask=state)
        window = e < C * K
        col = tl.load(conv_index + node * K + e % K, mask=window, other=0)
        tl.store(conv + g * C * K + e, tl.load(bank + (g * C + e // K) * width + col, mask=window), mask=window)


def _launch(bank, nodes, conv_index, last, conv, rec) -> None:
    count, channels, width = bank.shape
    k, n, r = conv.shape[2], nodes.shape[1], rec[0].numel()
    with on_device(conv):
        _install_kernel[(count, triton.cdiv(max(r, channels * k), BLOCK))](
            bank, nodes, conv_index, last, conv, rec, channels, k, width, n, r, BLOCK=BLOCK, num_warps=4)


@torch.compiler.disable     # writes the committed state in place: always this launch
def install(bank, nodes, conv_index, last, conv, rec) -> None:
    """The kernel where it can run, else `torch_install`."""
    tensors = (bank, nodes, conv_index, conv, rec)
    if triton is None or bank.device.type != "cuda" or not all(t.is_contiguous() for t in tensors):
        return torch_install(bank, nodes, conv_index, last, conv, rec)
    return _launch(bank, nodes, conv_index, last, conv, rec)


def install_interpreted(bank, nodes, conv_index, last, conv, rec) -> None:
    """The kernel under Triton's interpreter (TRITON_INTERPRET=1) on CPU tensors, for tests."""
    _launch(bank, nodes, conv_index, last, conv, rec)
