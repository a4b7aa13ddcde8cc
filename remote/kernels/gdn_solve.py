"""The gated delta rule over a token tree of up to MAX_NODES nodes as two short Triton launches (CUDA): the tree's
node-by-node solve once per value head, then every (head, value block)'s products in parallel; and commit's state
after one node in one product a program. Drop-ins for remote.kernels.gdn_chunked's, off (`ENABLED`) until measured.

Contract: `tree_recurrence(q, k, v, g, beta, state, visible, height)` -> (out [N, HV, Dv] in v's dtype, (u [N, HV,
Dv] float32, log decay down each node's path [N, HV] float32)) and `node_state(k, solved, state, visible, node,
out=None, conv=None)` are exactly remote.kernels.gdn_chunked's (the same inputs and results: its docstring); trees
of more than MAX_NODES nodes go to its kernels. `height` bounds the tree's depth + 1 (a host int). Both run under
Triton's interpreter on CPU tensors (TRITON_INTERPRET=1, tests). The tiles and the products' precision are module
constants, read at every call, so bench/bench_kernels.py times others.
"""
from __future__ import annotations

import torch

from . import gdn_chunked

try:
    import triton
    import triton.language as tl

    from .gdn_chunked import _conv_window, _decays, _unit_rows, _visible
except ImportError:          # CPU-only installs: remote.models.gdn runs the sequence kernels
    triton = None

# The same form as remote.kernels.gdn_chunked (its comment has the algebra): u = (I + A)^-1 b, o = g * (Q S_0) +
# ((Q K^T) * decays * visible) u, A = beta * (K K^T) * decays, strictly over ancestors, nilpotent below the tree's
# height. There a program walks the nodes in blocks of 16, each block a chain of small dependent products, and
# holds 64 value columns of one head: 96 programs at Qwen3.6-27B widths, 55 us a layer for 33 nodes where fla's
# one-token step takes 4.7 (one H100, 2026-12-05, `gpu_suite.sh q27b_kernels`). Here nothing waits on a previous
# block: a program per head builds T = (I + A)^-1 = (I - A)(I + A^2)(I + A^4)... and M = ((Q K^T) * decays *
# visible) T over all its nodes at once (log2(height) squarings of an N x N matrix, on tensor cores), then a
# program per (head, BLOCK_V value columns) needs four products: K S_0, Q S_0, u = T b and o = g Q S_0 + M b.
ENABLED = False          # off until `gpu_suite.sh gdn_solve` times it against the chunked kernel
MAX_NODES = 64           # padded to a power of two: past 64, N x N products of 128 cost more than blocks of 16
BLOCK_V = 32             # value columns a program of the second launch holds: 4 x 48 = 192 programs at 27B widths
NUM_WARPS = 4
DOT_SOLVE = "tf32x3"     # the N x N products: three TF32 passes, float32's accuracy on tensor cores
DOT_APPLY = "tf32x3"     # the second launch's (K S_0 and Q S_0 read the float32 state)
# "powers": the first launch only squares A (A, A^2, A^4, ... stored: four products in turn where T and M took
# nine) and each (head, value block) program applies the factors (I - A)(I + A^2)... to its own columns and forms
# (Q K^T) * decays itself: shorter first launch, longer second. Off until `gpu_suite.sh gdn_solve` times it
# (solve-powers rows).
FORM = "product"


if triton is not None:
    @triton.jit
    def _solve_kernel(q, k, g, beta, visible, t_out, m_out, lg_out, N, HV, q_t, q_h, k_t, k_h, scale,
                      DK: tl.constexpr, NP: tl.constexpr, BK: tl.constexpr, FACTORS: tl.constexpr,
                      DOT: tl.constexpr):
        """Program `head`: T and M [NP, NP] of its nodes, and each node's log decay down its path."""
        head = tl.program_id(0)
        r = tl.arange(0, NP)
        dk = tl.arange(0, BK)
        on = r < N
        on_k = on[:, None] & (dk < DK)[None, :]
        kn = _unit_rows(k, r, dk, on_k, k_t, head * k_h)
        qn = _unit_rows(q, r, dk, on_k, q_t, head * q_h) * scale
        vis = _visible(visible, r, r, N)
        gh = tl.load(g + r * HV + head, mask=on, other=0.0).to(tl.float32)
        lg = tl.sum(tl.where(vis, gh[None, :], 0.0), 1)                  # log decay down each path, itself included
        rel = _decays(vis, lg, lg)
        bh = tl.load(beta + r * HV + head, mask=on, other=0.0).to(tl.float32)
        eye = r[:, None] == r[None, :]
        a = tl.dot(kn, tl.trans(kn), input_precision=DOT) * rel * bh[:, None]
        a = tl.where(eye, 0.0, a)                                          # strictly the ancestors
        t = tl.where(eye, 1.0, 0.0) - a
        for _ in tl.static_range(1, FACTORS):
            a = tl.dot(a, a, input_precision=DOT)
            t += tl.dot(t, a, input_precision=DOT)
        m = tl.dot(tl.dot(qn, tl.trans(kn), input_precision=DOT) * rel, t, input_precision=DOT)
        grid = head * NP * NP + r[:, None] * NP + r[None, :]
        tl.store(t_out + grid, t)
        tl.store(m_out + grid, m)
        tl.store(lg_out + r * HV + head, lg, mask=on)

    @triton.jit
    def _columns_in(q, k, v, beta, state, lg_in, N, HV, q_t, q_h, k_t, k_h, v_t, v_h, scale, DK: tl.constexpr,
                    DV: tl.constexpr, NP: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, DOT: tl.constexpr):
        """Program (value block, head)'s operands: unit k and q (scaled) rows, each node's log decay, the right-hand
        side b = beta (v - g K S_0) and g Q S_0 of its columns."""
        block, head = tl.program_id(0), tl.program_id(1)
        r = tl.arange(0, NP)
        dk = tl.arange(0, BK)
        dv = block * BV + tl.arange(0, BV)
        on, in_k, in_v = r < N, dk < DK, dv < DV
        kn = _unit_rows(k, r, dk, on[:, None] & in_k[None, :], k_t, head * k_h)
        qn = _unit_rows(q, r, dk, on[:, None] & in_k[None, :], q_t, head * q_h) * scale
        s0 = tl.load(state + head * DK * DV + dk[:, None] * DV + dv[None, :], mask=in_k[:, None] & in_v[None, :],
                     other=0.0)
        lg = tl.load(lg_in + r * HV + head, mask=on, other=0.0)
        bh = tl.load(beta + r * HV + head, mask=on, other=0.0).to(tl.float32)
        vb = tl.load(v + r[:, None] * v_t + head * v_h + dv[None, :], mask=on[:, None] & in_v[None, :],
                     other=0.0).to(tl.float32)
        rhs = bh[:, None] * (vb - tl.exp(lg)[:, None] * tl.dot(kn, s0, input_precision=DOT))
        return kn, qn, lg, rhs, tl.exp(lg)[:, None] * tl.dot(qn, s0, input_precision=DOT)

    @triton.jit
    def _columns_out(out, u_out, o, u, N, HV, DV: tl.constexpr, NP: tl.constexpr, BV: tl.constexpr):
        """Program (value block, head)'s columns of every node's output and correction u stored."""
        r = tl.arange(0, NP)
        dv = tl.program_id(0) * BV + tl.arange(0, BV)
        dest = r[:, None] * HV * DV + tl.program_id(1) * DV + dv[None, :]
        tl.store(out + dest, o.to(out.dtype.element_ty), mask=(r < N)[:, None] & (dv < DV)[None, :])
        tl.store(u_out + dest, u, mask=(r < N)[:, None] & (dv < DV)[None, :])

    @triton.jit
    def _apply_kernel(q, k, v, beta, state, t_in, m_in, lg_in, out, u_out, N, HV, q_t, q_h, k_t, k_h, v_t, v_h,
                      scale, DK: tl.constexpr, DV: tl.constexpr, NP: tl.constexpr, BK: tl.constexpr,
                      BV: tl.constexpr, DOT: tl.constexpr):
        """Program (value block, head): its columns of every node's output and correction u."""
        _, _, _, rhs, gqs = _columns_in(q, k, v, beta, state, lg_in, N, HV, q_t, q_h, k_t, k_h, v_t, v_h, scale, DK,
                                        DV, NP, BK, BV, DOT)
        r = tl.arange(0, NP)
        grid = tl.program_id(1) * NP * NP + r[:, None] * NP + r[None, :]
        u = tl.dot(tl.load(t_in + grid), rhs, input_precision=DOT)
        o = gqs + tl.dot(tl.load(m_in + grid), rhs, input_precision=DOT)
        _columns_out(out, u_out, o, u, N, HV, DV, NP, BV)

    @triton.jit
    def _state_kernel(k, u, lg, visible, state, node, new, bank, conv_index, conv, N, HV, C, k_t, k_h, bank_c,
                      DK: tl.constexpr, DV: tl.constexpr, NP: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                      DOT: tl.constexpr, KC: tl.constexpr, CB: tl.constexpr):
        """Program (value block, head): its tile of the state after node `node`, g_i S_0 + sum over i's path of
        (g_i / g_j) k_j u_j^T, as one product over every node (the others weigh 0); and its share of the conv
        window."""
        block, head = tl.program_id(0), tl.program_id(1)
        r = tl.arange(0, NP)
        dk = tl.arange(0, BK)
        dv = block * BV + tl.arange(0, BV)
        on, in_k, in_v = r < N, dk < DK, dv < DV
        i = tl.load(node)
        if KC > 0:
            _conv_window(bank, conv_index, conv, i, head * tl.num_programs(0) + block, C, bank_c, KC, CB)
        lgi = tl.load(lg + i * HV + head)
        path = tl.load(visible + i * N + r, mask=on, other=0) != 0                    # i's ancestors and i
        w = tl.where(path, tl.exp(lgi - tl.load(lg + r * HV + head, mask=on, other=0.0)), 0.0)
        kn = _unit_rows(k, r, dk, on[:, None] & in_k[None, :], k_t, head * k_h)
        up = tl.load(u + r[:, None] * HV * DV + head * DV + dv[None, :], mask=on[:, None] & in_v[None, :],
                     other=0.0)
        grid = head * DK * DV + dk[:, None] * DV + dv[None, :]
        in_kv = in_k[:, None] & in_v[None, :]
        s = tl.exp(lgi) * tl.load(state + grid, mask=in_kv, other=0.0)
        s += tl.dot(tl.trans(kn * w[:, None]), up, input_precision=DOT)
        tl.store(new + grid, s, mask=in_kv)


    @triton.jit
    def _powers_kernel(k, g, beta, visible, p_out, lg_out, N, HV, k_t, k_h, DK: tl.constexpr, NP: tl.constexpr,
                       BK: tl.constexpr, FACTORS: tl.constexpr, DOT: tl.constexpr):
        """Program `head`: A, A^2, ..., A^(2^(FACTORS-1)) [FACTORS, NP, NP] of its nodes, and each node's log decay
        down its path."""
        head = tl.program_id(0)
        r = tl.arange(0, NP)
        dk = tl.arange(0, BK)
        on = r < N
        kn = _unit_rows(k, r, dk, on[:, None] & (dk < DK)[None, :], k_t, head * k_h)
        vis = _visible(visible, r, r, N)
        gh = tl.load(g + r * HV + head, mask=on, other=0.0).to(tl.float32)
        lg = tl.sum(tl.where(vis, gh[None, :], 0.0), 1)
        bh = tl.load(beta + r * HV + head, mask=on, other=0.0).to(tl.float32)
        a = tl.dot(kn, tl.trans(kn), input_precision=DOT) * _decays(vis, lg, lg) * bh[:, None]
        a = tl.where(r[:, None] == r[None, :], 0.0, a)                    # strictly the ancestors
        grid = head * FACTORS * NP * NP + r[:, None] * NP + r[None, :]
        tl.store(p_out + grid, a)
        for f in tl.static_range(1, FACTORS):
            a = tl.dot(a, a, input_precision=DOT)
            tl.store(p_out + grid + f * NP * NP, a)
        tl.store(lg_out + r * HV + head, lg, mask=on)

    @triton.jit
    def _apply_powers_kernel(q, k, v, beta, state, visible, p_in, lg_in, out, u_out, N, HV, q_t, q_h, k_t, k_h, v_t,
                             v_h, scale, DK: tl.constexpr, DV: tl.constexpr, NP: tl.constexpr, BK: tl.constexpr,
                             BV: tl.constexpr, FACTORS: tl.constexpr, DOT: tl.constexpr):
        """Program (value block, head): u = (I - A)(I + A^2)... b and o = g Q S_0 + ((Q K^T) * decays) u."""
        kn, qn, lg, rhs, gqs = _columns_in(q, k, v, beta, state, lg_in, N, HV, q_t, q_h, k_t, k_h, v_t, v_h, scale,
                                           DK, DV, NP, BK, BV, DOT)
        r = tl.arange(0, NP)
        grid = tl.program_id(1) * FACTORS * NP * NP + r[:, None] * NP + r[None, :]
        u = rhs - tl.dot(tl.load(p_in + grid), rhs, input_precision=DOT)
        for f in tl.static_range(1, FACTORS):
            u += tl.dot(tl.load(p_in + grid + f * NP * NP), u, input_precision=DOT)
        qk = tl.dot(qn, tl.trans(kn), input_precision=DOT) * _decays(_visible(visible, r, r, N), lg, lg)
        _columns_out(out, u_out, gqs + tl.dot(qk, u, input_precision=DOT), u, N, HV, DV, NP, BV)


def tree_recurrence(q, k, v, g, beta, state, visible, height: int):
    """See the module docstring."""
    n, (hv, dk), dv = q.shape[0], q.shape[1:], v.shape[-1]
    if n > MAX_NODES:
        return gdn_chunked.tree_recurrence(q, k, v, g, beta, state, visible, height)
    if not (q.stride(-1) == k.stride(-1) == v.stride(-1) == 1):
        raise ValueError("tree_recurrence needs q, k, v contiguous in their last dimension")
    bv = max(16, min(triton.next_power_of_2(dv), BLOCK_V))
    out = torch.empty(n, hv, dv, dtype=v.dtype, device=v.device)
    u = torch.empty(n, hv, dv, dtype=torch.float32, device=v.device)
    if FORM == "powers":
        return _powers_form(q, k, v, g, beta, state, visible, height, out, u, bv)
    t, m, lg = solve_launch(q, k, g, beta, visible, height)
    np_, bk = t.shape[-1], max(16, triton.next_power_of_2(dk))
    beta, state = beta.contiguous(), state.contiguous()
    _apply_kernel[(triton.cdiv(dv, bv), hv)](
        q, k, v, beta, state, t, m, lg, out, u, n, hv, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        v.stride(0), v.stride(1), dk ** -0.5, DK=dk, DV=dv, NP=np_, BK=bk, BV=bv, DOT=DOT_APPLY,
        num_warps=NUM_WARPS)
    return out, (u, lg)


def _powers_form(q, k, v, g, beta, state, visible, height: int, out, u, bv: int):
    """tree_recurrence with FORM "powers": A's powers in the first launch, their factors applied in the second."""
    n, (hv, dk), dv = q.shape[0], q.shape[1:], v.shape[-1]
    np_, bk = max(16, triton.next_power_of_2(n)), max(16, triton.next_power_of_2(dk))
    factors = max(1, (min(height, np_) - 1).bit_length())      # A^(2^factors) = 0: no path is that long
    lg = torch.empty(n, hv, dtype=torch.float32, device=q.device)
    powers = torch.empty(hv, factors, np_, np_, dtype=torch.float32, device=q.device)
    beta, state = beta.contiguous(), state.contiguous()
    seen = visible.contiguous().view(torch.uint8)
    _powers_kernel[(hv,)](k, g.contiguous(), beta, seen, powers, lg, n, hv, k.stride(0), k.stride(1), DK=dk, NP=np_,
                          BK=bk, FACTORS=factors, DOT=DOT_SOLVE, num_warps=NUM_WARPS)
    _apply_powers_kernel[(triton.cdiv(dv, bv), hv)](
        q, k, v, beta, state, seen, powers, lg, out, u, n, hv, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        v.stride(0), v.stride(1), dk ** -0.5, DK=dk, DV=dv, NP=np_, BK=bk, BV=bv, FACTORS=factors, DOT=DOT_APPLY,
        num_warps=NUM_WARPS)
    return out, (u, lg)


def solve_launch(q, k, g, beta, visible, height: int):
    """The first launch: each head's T and M [HV, NP, NP] and each node's log decay down its path [N, HV]."""
    n, (hv, dk) = q.shape[0], q.shape[1:]
    np_, bk = max(16, triton.next_power_of_2(n)), max(16, triton.next_power_of_2(dk))
    lg = torch.empty(n, hv, dtype=torch.float32, device=q.device)
    t, m = (torch.empty(hv, np_, np_, dtype=torch.float32, device=q.device) for _ in range(2))
    g, beta = g.contiguous(), beta.contiguous()
    seen = visible.contiguous().view(torch.uint8)
    factors = max(1, (min(height, np_) - 1).bit_length())      # A^(2^factors) = 0: no path is that long
    _solve_kernel[(hv,)](q, k, g, beta, seen, t, m, lg, n, hv, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                         dk ** -0.5, DK=dk, NP=np_, BK=bk, FACTORS=factors, DOT=DOT_SOLVE, num_warps=NUM_WARPS)
    return t, m, lg


def node_state(k, solved, state, visible, node, out=None, conv=None):
    """See the module docstring (remote.kernels.gdn_chunked.node_state's contract)."""
    n, _, dk = k.shape
    if n > MAX_NODES:
        return gdn_chunked.node_state(k, solved, state, visible, node, out, conv)
    bv = max(16, min(triton.next_power_of_2(solved[0].shape[-1]), BLOCK_V))
    grid, args, sizes = gdn_chunked.state_operands(k, solved, state, visible, node, out, conv, bv)
    _state_kernel[grid](*args, NP=max(16, triton.next_power_of_2(n)), BK=max(16, triton.next_power_of_2(dk)), BV=bv,
                        DOT=DOT_APPLY, num_warps=NUM_WARPS, **sizes)
    return args[6]
