"""The gated delta rule over a token tree as two Triton kernels (CUDA): every node's output from its parent's
recurrent state in one launch per GDN layer, and, at commit, the state after any one node in another.

Why this form: unrolled along a root-to-node path, the delta rule's state after node t is
    S_t = g_t S_0 + sum_{j on the path to t} (g_t / g_j) k_j u_j^T,   u_t = beta_t (v_t - g_t S_0^T k_t
                                                                        - sum_{j strictly above t} (g_t / g_j) (k_j . k_t) u_j)
with g_t the decay accumulated down the path (exp of the summed log gates) and u_t a node's own correction, which
depends only on the node's own path. So every node of a tree is one row of the chunked form (fla's
`chunk_gated_delta_rule`) with the causal mask replaced by the ancestor mask: u = (I + A)^-1 b with A strictly
"lower" in the ancestor order, outputs o = g * (Q S_0) + ((Q K^T) * decays * visible) u. A is nilpotent (A^m = 0
past the tree height), so its inverse is the product (I - A)(I + A^2)(I + A^4)... of log2(height) factors: a few
small matrix products on tensor cores instead of each node re-running its whole path one step at a time (the
previous kernel: 45 us a layer at Qwen3.6-27B widths for 33 nodes, session 17, ten times fla's one-token step).
Nothing of size N x state is written: commit rebuilds the accepted node's state from S_0, the node's path's keys
and u (kept from the verify, [N, HV, Dv]), so no per-node state has to be kept or recomputed.

Contract:
- `tree_recurrence(q, k, v, g, beta, state, visible, height)` -> (out [N, HV, Dv] in v's dtype, solved), from
  the inputs of the N tree nodes: q, k [N, HV, Dk] raw (l2-normalised here, q scaled by Dk^-0.5, as fla's
  `use_qk_l2norm_in_kernel`), v [N, HV, Dv], g (log decay) and beta [N, HV], state [HV, Dk, Dv] float32 (the
  committed one), visible [N, N] bool (remote.tree.Ancestry.visible: j is i or an ancestor of i), height (the
  tree's, a host int). `solved` = (u [N, HV, Dv] float32, log decay down each node's path [N, HV] float32).
- `node_state(k, solved, state, visible, node)` -> [1, HV, Dk, Dv] float32: the state after node `node` ([1] long,
  on the device: no host read).
Both run under Triton's interpreter on CPU tensors (TRITON_INTERPRET=1, tests).
"""
from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU-only installs: remote.models.gdn keeps the sequence kernels
    triton = None


def available(device: torch.device) -> bool:
    return triton is not None and device.type == "cuda"


if triton is not None:
    @triton.jit
    def _unit_rows(ptr, rows, cols, on, row_stride, head_offset):
        """Rows `rows` of one head's [N, D] slice, l2-normalised in float32 (masked rows and columns read 0)."""
        x = tl.load(ptr + rows[:, None] * row_stride + head_offset + cols[None, :], mask=on, other=0.0)
        x = x.to(tl.float32)
        return x / tl.sqrt(tl.sum(x * x, 1) + 1e-6)[:, None]

    @triton.jit
    def _tree_gdn_kernel(q, k, v, g, beta, state, visible, out, u_out, lg_out, N, HV, q_t, q_h, k_t, k_h, v_t, v_h,
                         scale, DK: tl.constexpr, DV: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                         BV: tl.constexpr, FACTORS: tl.constexpr, DOT: tl.constexpr):
        block, head = tl.program_id(0), tl.program_id(1)
        n = tl.arange(0, BN)
        dk = tl.arange(0, BK)
        dv = block * BV + tl.arange(0, BV)
        on, in_k, in_v = n < N, dk < DK, dv < DV
        nk, nv = on[:, None] & in_k[None, :], on[:, None] & in_v[None, :]
        ks = _unit_rows(k, n, dk, nk, k_t, head * k_h)
        qs = _unit_rows(q, n, dk, nk, q_t, head * q_h) * scale
        vs = tl.load(v + n[:, None] * v_t + head * v_h + dv[None, :], mask=nv, other=0.0).to(tl.float32)
        gs = tl.load(g + n * HV + head, mask=on, other=0.0).to(tl.float32)
        bs = tl.load(beta + n * HV + head, mask=on, other=0.0).to(tl.float32)
        vis = tl.load(visible + n[:, None] * N + n[None, :], mask=on[:, None] & on[None, :], other=0) != 0
        s0 = tl.load(state + head * DK * DV + dk[:, None] * DV + dv[None, :], mask=in_k[:, None] & in_v[None, :],
                     other=0.0)
        lg = tl.sum(tl.where(vis, gs[None, :], 0.0), 1)                      # log decay down each node's path
        rel = tl.exp(tl.where(vis, lg[:, None] - lg[None, :], float("-inf")))  # g_i / g_j, j on i's path; else 0
        strict = rel * (n[:, None] != n[None, :])
        a = tl.dot(ks, tl.trans(ks), input_precision=DOT) * strict * bs[:, None]
        u = bs[:, None] * (vs - tl.exp(lg)[:, None] * tl.dot(ks, s0, input_precision=DOT))
        u -= tl.dot(a, u, input_precision=DOT)                                # (I - A)
        for _ in tl.static_range(1, FACTORS):                                  # (I + A^2)(I + A^4)...
            a = tl.dot(a, a, input_precision=DOT)
            u += tl.dot(a, u, input_precision=DOT)
        o = tl.exp(lg)[:, None] * tl.dot(qs, s0, input_precision=DOT) \
            + tl.dot(tl.dot(qs, tl.trans(ks), input_precision=DOT) * rel, u, input_precision=DOT)
        rows = n[:, None] * HV * DV + head * DV + dv[None, :]
        tl.store(out + rows, o.to(out.dtype.element_ty), mask=nv)
        tl.store(u_out + rows, u, mask=nv)
        if block == 0:
            tl.store(lg_out + n * HV + head, lg, mask=on)

    @triton.jit
    def _node_state_kernel(k, u, lg, visible, state, node, new, N, HV, k_t, k_h, DK: tl.constexpr,
                           DV: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                           DOT: tl.constexpr):
        block, head = tl.program_id(0), tl.program_id(1)
        n = tl.arange(0, BN)
        dk = tl.arange(0, BK)
        dv = block * BV + tl.arange(0, BV)
        on, in_k, in_v = n < N, dk < DK, dv < DV
        i = tl.load(node)
        ks = _unit_rows(k, n, dk, on[:, None] & in_k[None, :], k_t, head * k_h)
        us = tl.load(u + n[:, None] * HV * DV + head * DV + dv[None, :], mask=on[:, None] & in_v[None, :], other=0.0)
        lgs = tl.load(lg + n * HV + head, mask=on, other=0.0)
        lgi = tl.load(lg + i * HV + head)
        path = (tl.load(visible + i * N + n, mask=on, other=0) != 0)
        w = tl.exp(tl.where(path, lgi - lgs, float("-inf")))                    # g_i / g_j on i's path, else 0
        grid = head * DK * DV + dk[:, None] * DV + dv[None, :]
        in_kv = in_k[:, None] & in_v[None, :]
        s = tl.exp(lgi) * tl.load(state + grid, mask=in_kv, other=0.0) \
            + tl.dot(tl.trans(ks * w[:, None]), us, input_precision=DOT)
        tl.store(new + grid, s, mask=in_kv)


# Blocking: value columns a program holds (its program computes the whole tree's A for them: more blocks, more
# parallel programs, more repeated small products), and its warps. DOT: the float32 products' precision ("tf32x3":
# three TF32 tensor-core passes, float32-close; "ieee": plain float32, the interpreter's).
BLOCK_V = 32
NUM_WARPS = 4
DOT = "tf32x3"


def _blocks(dk: int, dv: int, n: int) -> dict:
    """Tile sizes: tl.dot needs 16 or more along every dimension (masked loads pad with zeros)."""
    return dict(BN=max(16, triton.next_power_of_2(n)), BK=max(16, triton.next_power_of_2(dk)),
                BV=max(16, min(triton.next_power_of_2(dv), BLOCK_V)))


def _dot(device: torch.device) -> str:
    return DOT if device.type == "cuda" else "ieee"


def tree_recurrence(q, k, v, g, beta, state, visible, height: int):
    """See the module docstring. The blocking (BLOCK_V, NUM_WARPS, DOT) is read at every call, so
    bench/bench_kernels.py can time others."""
    if not (q.stride(-1) == k.stride(-1) == v.stride(-1) == 1):
        raise ValueError("tree_recurrence needs q, k, v contiguous in their last dimension")
    n, (hv, dk), dv = q.shape[0], q.shape[1:], v.shape[-1]
    out = torch.empty(n, hv, dv, dtype=v.dtype, device=v.device)
    u = torch.empty(n, hv, dv, dtype=torch.float32, device=v.device)
    lg = torch.empty(n, hv, dtype=torch.float32, device=v.device)
    blocks = _blocks(dk, dv, n)
    g, beta, state = (x.contiguous() for x in (g, beta, state))
    factors = max(1, (max(height, 1) - 1).bit_length())       # 2^factors > the deepest node's depth
    _tree_gdn_kernel[(triton.cdiv(dv, blocks["BV"]), hv)](
        q, k, v, g, beta, state, visible.contiguous().view(torch.uint8), out, u, lg, n, hv,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), dk ** -0.5,
        DK=dk, DV=dv, FACTORS=factors, DOT=_dot(v.device), num_warps=NUM_WARPS, **blocks)
    return out, (u, lg)


def node_state(k, solved, state, visible, node):
    """See the module docstring."""
    u, lg = solved
    n, hv, dk = k.shape
    dv = u.shape[-1]
    new = torch.empty(1, hv, dk, dv, dtype=torch.float32, device=u.device)
    blocks = _blocks(dk, dv, n)
    _node_state_kernel[(triton.cdiv(dv, blocks["BV"]), hv)](
        k, u, lg, visible.contiguous().view(torch.uint8), state.contiguous(), node, new, n, hv, k.stride(0),
        k.stride(1), DK=dk, DV=dv, DOT=_dot(u.device), num_warps=NUM_WARPS, **blocks)
    return new
