"""A DDTree commit's GDN install in one Triton launch (CUDA): for every layer of a device's stack
(remote.models.gdn_stack), the accepted node's conv window gathered from the verify's bank and its recurrent state
copied (`install`) or recomputed (`recompute`) into the committed state.

Contract: `install(bank, nodes, conv_index, last, conv, rec)` sets, for every layer g, conv[g, :, j] =
bank[g, :, conv_index[last, j]] and rec[g] = nodes[g, last]: bank [G, C, K + N], nodes [G, N, ...] float32,
conv_index [N, K] long (remote.models.gdn.TreeLayout), last [1] long on their device, conv [G, C, K] (bank's dtype)
and rec [G, ...] (nodes' trailing shape) written in place. `recompute(bank, saved, ancestors, depth, conv_index,
last, conv, rec)` installs the same window and, in place of a kept state, the state after node `last`'s path
(`ancestors` [N, H], `depth` [N]) recomputed from rec[g] over `saved` [G, N, HV, Dk + Dv + 2] float32, the nodes'
inputs the verify's tree kernel saved (remote.kernels.gdn_tree), with that kernel's steps and blocking: the bits of
the state it would have kept. Off CUDA, without Triton or with a non-contiguous tensor the torch ops do the same
(`torch_install`, `torch_recompute`: the references, equal to rounding). torch.compile leaves both out of its graphs.
"""
from __future__ import annotations

import torch

from . import gdn_tree, on_device

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


def torch_recompute(bank, saved, ancestors, depth, conv_index, last, conv, rec) -> None:
    """`recompute`'s definition, in torch ops (reads the path's length on the host)."""
    torch.index_select(bank, 2, conv_index.index_select(0, last)[0], out=conv)
    dk, dv = rec.shape[-2:]
    node = int(last[0])
    for row in ancestors[node, :int(depth[node]) + 1].tolist():
        x = saved[:, row]                                                   # [G, HV, Dk + Dv + 2]
        k = x[..., :dk] / torch.sqrt((x[..., :dk] ** 2).sum(-1, keepdim=True) + 1e-6)
        rec.mul_(x[..., dk + dv].exp()[..., None, None])
        error = x[..., dk:dk + dv] - torch.einsum("ghk,ghkv->ghv", k, rec)
        rec.add_(k[..., :, None] * (error * x[..., dk + dv + 1, None])[..., None, :])


if triton is not None:
    @triton.jit
    def _copy_window(bank, conv_index, conv, g, node, e, C, K, width):
        """Elements `e` of layer g's conv state [C, K]: node `node`'s window columns of its bank [C, width]."""
        window = e < C * K
        col = tl.load(conv_index + node * K + e % K, mask=window, other=0)
        tl.store(conv + g * C * K + e, tl.load(bank + (g * C + e // K) * width + col, mask=window), mask=window)

    # In torch ops an install is three launches whatever the layer count (the window's bank columns, the conv gather,
    # the recurrent gather): 6.9 us of kernel time in the demo hybrid's 21.8-us DDTree 15 commit, each also a gap in
    # the captured step. Here program (layer, block) reads the node index and the window's columns itself and copies
    # its block of both states: 2.0 us, the commit 16.2 us in 11 launches (one H200, 2026-12-04, `python3
    # bench/bench_methods.py $Q35 --temperatures 0 --num-prompts 4 --budgets 15 --phase-kernels`), and the hybrid's
    # DDTree 15 / DFlash 1.227x / 1.265x -> 1.272x / 1.297x in one call's interleaved runs (the same day, `python3
    # bench/bench_methods.py $Q35 --temperatures 0 --num-prompts 24 --budgets 15,31 --interleave`, old code beside).
    @triton.jit
    def _install_kernel(bank, nodes, conv_index, last, conv, rec, C, K, width, N, R, BLOCK: tl.constexpr):
        g, block = tl.program_id(0).to(tl.int64), tl.program_id(1)
        node = tl.load(last)
        e = block * BLOCK + tl.arange(0, BLOCK)
        state = e < R
        tl.store(rec + g * R + e, tl.load(nodes + (g * N + node) * R + e, mask=state), mask=state)
        _copy_window(bank, conv_index, conv, g, node, e, C, K, width)

    @triton.jit
    def _recompute_kernel(bank, saved, ancestors, depth, conv_index, last, conv, rec, C, K, width, N, H, HV, NVB,
                          DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, HP: tl.constexpr,
                          BLOCK: tl.constexpr):
        # programs (layer, head x value block) recompute a state block in place, (layer, NVB x HV + i) copy the
        # window's i-th block
        g, pid = tl.program_id(0).to(tl.int64), tl.program_id(1)
        node = tl.load(last)
        if pid < HV * NVB:
            head, block = pid // NVB, pid % NVB
            dk = tl.arange(0, BK)
            dv = block * BV + tl.arange(0, BV)
            in_k, in_v = dk < DK, dv < DV
            row = DK + DV + 2
            inputs = saved + g * N * HV * row
            state = rec + (g * HV + head) * DK * DV
            s = gdn_tree.path_state(inputs, inputs + DK, inputs + DK + DV, inputs + DK + DV + 1, state, ancestors,
                                    depth, node, H, head, HV * row, row, HV * row, row, HV * row, row, dk, dv, in_k,
                                    in_v, DV, HP)
            tl.store(state + dk[:, None] * DV + dv[None, :], s, mask=in_k[:, None] & in_v[None, :])
        else:
            _copy_window(bank, conv_index, conv, g, node, (pid - HV * NVB) * BLOCK + tl.arange(0, BLOCK), C, K, width)


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


def _recompute_launch(bank, saved, ancestors, depth, conv_index, last, conv, rec) -> None:
    count, channels, width = bank.shape
    hv, dk, dv = rec.shape[1:]
    bk, bv = gdn_tree.blocking(dk, dv)
    nvb, k = triton.cdiv(dv, bv), conv.shape[2]
    with on_device(conv):
        _recompute_kernel[(count, hv * nvb + triton.cdiv(channels * k, BLOCK))](
            bank, saved, ancestors, depth, conv_index, last, conv, rec, channels, k, width, saved.shape[1],
            ancestors.shape[1], hv, nvb, DK=dk, DV=dv, BK=bk, BV=bv, HP=triton.next_power_of_2(ancestors.shape[1]),
            BLOCK=BLOCK, num_warps=gdn_tree.NUM_WARPS)


@torch.compiler.disable     # writes the committed state in place: always this launch
def recompute(bank, saved, ancestors, depth, conv_index, last, conv, rec) -> None:
    """The kernel where it can run, else `torch_recompute`."""
    # the verify then writes Dk + Dv + 2 floats a node and head instead of Dk x Dv (1/32 at the demo's 64 x 64)
    tensors = (bank, saved, ancestors, depth, conv_index, conv, rec)
    if triton is None or bank.device.type != "cuda" or not all(t.is_contiguous() for t in tensors):
        return torch_recompute(bank, saved, ancestors, depth, conv_index, last, conv, rec)
    return _recompute_launch(bank, saved, ancestors, depth, conv_index, last, conv, rec)


def recompute_interpreted(bank, saved, ancestors, depth, conv_index, last, conv, rec) -> None:
    """`recompute`'s kernel under Triton's interpreter on CPU tensors, for tests."""
    _recompute_launch(bank, saved, ancestors, depth, conv_index, last, conv, rec)
