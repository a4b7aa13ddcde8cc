"""The gated delta rule over a token tree in the chunked form, as two Triton kernels (CUDA): every node's output
from its parent's recurrent state in one launch per GDN layer, and, at commit, the state after any one node.

Contract:
- `tree_recurrence(q, k, v, g, beta, state, visible, height)` -> (out [N, HV, Dv] in v's dtype, solved), from
  the inputs of the N tree nodes: q, k [N, HV, Dk] raw (l2-normalised here, q scaled by Dk^-0.5, as fla's
  `use_qk_l2norm_in_kernel`), v [N, HV, Dv], g (log decay) and beta [N, HV], state [HV, Dk, Dv] float32 (the
  committed one), visible [N, N] bool (remote.tree.Ancestry.visible: j is i or an ancestor of i), height (the
  tree's, a host int). `solved` = (u [N, HV, Dv] float32, log decay down each node's path [N, HV] float32).
- `node_state(k, solved, state, visible, node, out=None, conv=None)` -> [1, HV, Dk, Dv] float32: the state after
  node `node` ([1] long, on the device: no host read), written into `out` where given, which may be `state` itself
  (each program reads its tile of `state` before writing the same tile). `conv` = (bank [C, M], conv_index [N, K]
  long, window [C, K]): the same launch also writes the node's conv window, bank[:, conv_index[node]], to window
  (a commit's whole state after the node in one launch a layer).
Both run under Triton's interpreter on CPU tensors (TRITON_INTERPRET=1, tests).
"""
from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU-only installs: remote.models.gdn runs the sequence kernels
    triton = None


# The form: unrolled along a root-to-node path, the delta rule's state after node t is
#     S_t = g_t S_0 + sum_{j on the path to t} (g_t / g_j) k_j u_j^T,
#     u_t = beta_t (v_t - g_t S_0^T k_t - sum_{j strictly above t} (g_t / g_j) (k_j . k_t) u_j)
# with g_t the decay accumulated down the path (exp of the summed log gates) and u_t a node's own correction, which
# depends only on the node's own path. So every node of a tree is one row of the chunked form (fla's
# `chunk_gated_delta_rule`) with the causal mask replaced by the ancestor mask: u = (I + A)^-1 b with A strictly
# "lower" in the ancestor order, outputs o = g * (Q S_0) + ((Q K^T) * decays * visible) u. A is nilpotent (A^m = 0
# past the tree height). Nodes go in blocks of BLOCK_N in tree order (parents first): a block subtracts its
# ancestors' corrections from earlier blocks (already solved), then inverts its own part of I + A as the product
# (I - A)(I + A^2)(I + A^4)... of log2(BLOCK_N) factors. Nothing of size N x state is written: commit rebuilds the
# accepted node's state from S_0, the path's keys and u (kept from the verify, [N, HV, Dv]).
#
# Where it wins: a chain, where remote.kernels.gdn_tree's programs each re-run their node's whole path (N(N+1)/2
# steps): a DFlash chain of 16 at Qwen3.6-27B widths took 13 us a layer against that kernel's 50 (one H200,
# 2026-12-03, `gpu_suite.sh gdn_27b`), and the 27B DFlash step 20.6 ms against 22.2 (the same day, `gpu_suite.sh
# q27b`). And trees where the state is wide: at 27B widths 33 / 65 nodes took 48 / 89 us on a confident drafter's
# deep tree against the per-node kernel's 102 / 199, 44 / 79 on a bushy one against 60 / 115 (one H200, 2026-12-03,
# `gpu_suite.sh gdn`). A program walks the blocks one after another (HV x Dv / BLOCK_V programs in all), so the cost
# is nearly flat in HV and narrow layers keep the per-node kernel (at the demo's widths 64 nodes took 32-38 us
# against its 5-9): remote.kernels.gdn_paths.CHUNKED_TREES_FROM. Tried and reverted the same day (`gpu_suite.sh
# gdn`): the tree in three launches (the N x N products and T = (I + A)^-1 per head, then every block's rows in
# parallel): shorter serial chains, yet 15-21 us for the chain and 59-74 for 33 deep nodes.
if triton is not None:
    @triton.jit
    def _unit_rows(ptr, rows, cols, on, row_stride, head_offset):
        """Rows `rows` of one head's [N, D] slice, l2-normalised in float32 (masked rows and columns read 0)."""
        x = tl.load(ptr + rows[:, None] * row_stride + head_offset + cols[None, :], mask=on, other=0.0)
        x = x.to(tl.float32)
        return x / tl.sqrt(tl.sum(x * x, 1) + 1e-6)[:, None]

    @triton.jit
    def _visible(visible, rows, cols, N):
        """[rows, cols] bool: node j is node i or one of its ancestors."""
        return tl.load(visible + rows[:, None] * N + cols[None, :], mask=(rows < N)[:, None] & (cols < N)[None, :],
                       other=0) != 0

    @triton.jit
    def _decays(vis, lg_rows, lg_cols):
        """g_i / g_j where `vis`, else 0."""
        return tl.exp(tl.where(vis, lg_rows[:, None] - lg_cols[None, :], float("-inf")))

    @triton.jit
    def _chunked_gdn_kernel(q, k, v, g, beta, state, visible, out, u_out, lg_out, N, HV, q_t, q_h, k_t, k_h, v_t,
                            v_h, scale, DK: tl.constexpr, DV: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
                            BV: tl.constexpr, FACTORS: tl.constexpr, DOT: tl.constexpr):
        block, head = tl.program_id(0), tl.program_id(1)
        c = tl.arange(0, BC)
        dk = tl.arange(0, BK)
        dv = block * BV + tl.arange(0, BV)
        in_k, in_v = dk < DK, dv < DV
        s0 = tl.load(state + head * DK * DV + dk[:, None] * DV + dv[None, :], mask=in_k[:, None] & in_v[None, :],
                     other=0.0)
        # Blocks of BC nodes in tree order (parents first): a block's ancestors lie in it and the blocks before,
        # whose corrections u are solved and stored by then.
        for b in range(0, tl.cdiv(N, BC)):
            rows = b * BC + c
            on = rows < N
            kb = _unit_rows(k, rows, dk, on[:, None] & in_k[None, :], k_t, head * k_h)
            qb = _unit_rows(q, rows, dk, on[:, None] & in_k[None, :], q_t, head * q_h) * scale
            vb = tl.load(v + rows[:, None] * v_t + head * v_h + dv[None, :], mask=on[:, None] & in_v[None, :],
                         other=0.0).to(tl.float32)
            bb = tl.load(beta + rows * HV + head, mask=on, other=0.0).to(tl.float32)
            lgb = tl.zeros([BC], dtype=tl.float32)          # log decay down each node's path, itself included
            for p in range(0, b + 1):
                cols = p * BC + c
                vis = _visible(visible, rows, cols, N)
                gp = tl.load(g + cols * HV + head, mask=cols < N, other=0.0).to(tl.float32)
                lgb += tl.sum(tl.where(vis, gp[None, :], 0.0), 1)
            rhs = bb[:, None] * (vb - tl.exp(lgb)[:, None] * tl.dot(kb, s0, input_precision=DOT))
            o = tl.exp(lgb)[:, None] * tl.dot(qb, s0, input_precision=DOT)
            for p in range(0, b):                            # ancestors in earlier blocks (wide trees: few)
                cols = p * BC + c
                vis = _visible(visible, rows, cols, N)
                if tl.max(vis.to(tl.int32)) > 0:
                    onp = cols < N
                    kp = _unit_rows(k, cols, dk, onp[:, None] & in_k[None, :], k_t, head * k_h)
                    up = tl.load(u_out + cols[:, None] * HV * DV + head * DV + dv[None, :],
                                 mask=onp[:, None] & in_v[None, :], other=0.0)
                    rel = _decays(vis, lgb, tl.load(lg_out + cols * HV + head, mask=onp, other=0.0))
                    rhs -= bb[:, None] * tl.dot(tl.dot(kb, tl.trans(kp), input_precision=DOT) * rel, up,
                                                input_precision=DOT)
                    o += tl.dot(tl.dot(qb, tl.trans(kp), input_precision=DOT) * rel, up, input_precision=DOT)
            # ancestors in the block itself: (I + A) u = rhs, A nilpotent, its inverse (I - A)(I + A^2)(I + A^4)...
            rel = _decays(_visible(visible, rows, rows, N), lgb, lgb)
            a = tl.dot(kb, tl.trans(kb), input_precision=DOT) * rel * (c[:, None] != c[None, :]) * bb[:, None]
            u = rhs - tl.dot(a, rhs, input_precision=DOT)
            for _ in tl.static_range(1, FACTORS):
                a = tl.dot(a, a, input_precision=DOT)
                u += tl.dot(a, u, input_precision=DOT)
            o += tl.dot(tl.dot(qb, tl.trans(kb), input_precision=DOT) * rel, u, input_precision=DOT)
            dest = rows[:, None] * HV * DV + head * DV + dv[None, :]
            tl.store(out + dest, o.to(out.dtype.element_ty), mask=on[:, None] & in_v[None, :])
            tl.store(u_out + dest, u, mask=on[:, None] & in_v[None, :])
            tl.store(lg_out + rows * HV + head, lgb, mask=on)     # every value block writes the same values
            tl.debug_barrier()                                       # the next blocks read these rows back

    @triton.jit
    def _conv_window(bank, conv_index, conv, i, program, C, bank_c, KC: tl.constexpr, CB: tl.constexpr):
        """Node i's conv window (its KC columns of the bank) into `conv`: CB channels a program."""
        ch = program * CB + tl.arange(0, CB)
        for j in tl.static_range(KC):
            col = tl.load(conv_index + i * KC + j)
            tl.store(conv + ch * KC + j, tl.load(bank + ch * bank_c + col, mask=ch < C), mask=ch < C)

    @triton.jit
    def _node_state_kernel(k, u, lg, visible, state, node, new, bank, conv_index, conv, N, HV, C, k_t, k_h, bank_c,
                           DK: tl.constexpr, DV: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                           DOT: tl.constexpr, KC: tl.constexpr, CB: tl.constexpr):
        block, head = tl.program_id(0), tl.program_id(1)
        c = tl.arange(0, BC)
        dk = tl.arange(0, BK)
        dv = block * BV + tl.arange(0, BV)
        in_k, in_v = dk < DK, dv < DV
        i = tl.load(node)
        if KC > 0:
            _conv_window(bank, conv_index, conv, i, head * tl.num_programs(0) + block, C, bank_c, KC, CB)
        lgi = tl.load(lg + i * HV + head)
        grid = head * DK * DV + dk[:, None] * DV + dv[None, :]
        in_kv = in_k[:, None] & in_v[None, :]
        s = tl.exp(lgi) * tl.load(state + grid, mask=in_kv, other=0.0)
        me = tl.zeros([1], dtype=i.dtype) + i
        for p in range(0, i // BC + 1):                      # the blocks holding i's path
            cols = p * BC + c
            onp = cols < N
            kp = _unit_rows(k, cols, dk, onp[:, None] & in_k[None, :], k_t, head * k_h)
            up = tl.load(u + cols[:, None] * HV * DV + head * DV + dv[None, :], mask=onp[:, None] & in_v[None, :],
                         other=0.0)
            w = _decays(_visible(visible, me, cols, N), tl.zeros([1], dtype=tl.float32) + lgi,
                        tl.load(lg + cols * HV + head, mask=onp, other=0.0))              # [1, BC]
            s += tl.dot(tl.trans(kp * tl.trans(w)), up, input_precision=DOT)
        tl.store(new + grid, s, mask=in_kv)


# Blocking: nodes a block holds (BLOCK_N, the solve's unit), value columns a program holds (each program runs the
# tree's small products for its columns: more blocks, more parallel programs, more repeated products) and its
# warps (a chain of 16 at 27B widths: 4 fastest of those timed). BLOCK_V None: by width, 64 columns where that still
# makes MIN_PROGRAMS programs, else 32. Us a layer, 64 against 32 columns: 48 heads of 128 (96 programs) 48.0 / 55.6
# at 33 deep nodes, 89.1 / 105.7 at 65, a chain of 16 13.2 / 13.0; 16 heads of 128 44.4 / 31.5, 89.0 / 65.6, chain
# 13.1 / 8.9; the demo's 4 heads of 64: chain 7.1 / 6.0 (one H200, 2026-12-03, `gpu_suite.sh gdn`). DOT: the float32
# products' precision ("ieee": plain float32, also the fastest there; "tf32x3": three TF32 tensor-core passes).
BLOCK_N = 16
BLOCK_V = None
MIN_PROGRAMS = 96
NUM_WARPS = 4
DOT = "ieee"


def _blocks(dk: int, dv: int, hv: int) -> dict:
    """Tile sizes: tl.dot needs 16 or more along every dimension (masked loads pad with zeros)."""
    columns = BLOCK_V or (64 if hv * triton.cdiv(dv, 64) >= MIN_PROGRAMS else 32)
    return dict(BC=BLOCK_N, BK=max(16, triton.next_power_of_2(dk)),
                BV=max(16, min(triton.next_power_of_2(dv), columns)))


def tree_recurrence(q, k, v, g, beta, state, visible, height: int):
    """See the module docstring. The blocking (BLOCK_N, BLOCK_V, NUM_WARPS, DOT) is read at every call, so
    bench/bench_kernels.py can time others."""
    if not (q.stride(-1) == k.stride(-1) == v.stride(-1) == 1):
        raise ValueError("tree_recurrence needs q, k, v contiguous in their last dimension")
    n, (hv, dk), dv = q.shape[0], q.shape[1:], v.shape[-1]
    out = torch.empty(n, hv, dv, dtype=v.dtype, device=v.device)
    u = torch.empty(n, hv, dv, dtype=torch.float32, device=v.device)
    lg = torch.empty(n, hv, dtype=torch.float32, device=v.device)
    blocks = _blocks(dk, dv, hv)
    g, beta, state = (x.contiguous() for x in (g, beta, state))
    factors = max(1, (min(height, BLOCK_N) - 1).bit_length())     # A^(2^factors) = 0 inside a block
    _chunked_gdn_kernel[(triton.cdiv(dv, blocks["BV"]), hv)](
        q, k, v, g, beta, state, visible.contiguous().view(torch.uint8), out, u, lg, n, hv,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), dk ** -0.5,
        DK=dk, DV=dv, FACTORS=factors, DOT=DOT, num_warps=NUM_WARPS, **blocks)
    return out, (u, lg)


def node_state(k, solved, state, visible, node, out=None, conv=None):
    """See the module docstring."""
    blocks = _blocks(k.shape[2], solved[0].shape[-1], k.shape[1])
    grid, args, sizes = state_operands(k, solved, state, visible, node, out, conv, blocks["BV"])
    _node_state_kernel[grid](*args, DOT=DOT, num_warps=NUM_WARPS, **sizes, **blocks)
    return args[6]


def state_operands(k, solved, state, visible, node, out, conv, columns: int) -> tuple[tuple, list, dict]:
    """A `node_state` kernel's launch, its state checked and made where `out` is None: (grid of (value block of
    `columns`, head), its arguments up to bank_c, the new state 7th, and its sizes DK, DV, KC and CB)."""
    u, lg = solved
    n, hv, dk = k.shape
    dv = u.shape[-1]
    new = torch.empty(1, hv, dk, dv, dtype=torch.float32, device=u.device) if out is None else out
    if not (new.is_contiguous() and new.dtype == torch.float32 and new.shape == (1, hv, dk, dv)):
        raise ValueError("node_state writes a contiguous float32 [1, HV, Dk, Dv] out")
    grid = (triton.cdiv(dv, columns), hv)
    bank, conv_index, window = conv if conv is not None else (new, node, new)    # KC = 0: never read
    kc = conv_index.shape[1] if conv is not None else 0
    if conv is not None and not (bank.stride(1) == 1 and window.is_contiguous() and window.shape == (bank.shape[0], kc)
                                 and window.dtype == bank.dtype):
        raise ValueError("node_state's conv: bank [C, M] rows contiguous, window a contiguous [C, K] of its dtype")
    channels = bank.shape[0] if conv is not None else 0
    args = [k, u, lg, visible.contiguous().view(torch.uint8), state.contiguous(), node, new, bank,
            conv_index.contiguous(), window, n, hv, channels, k.stride(0), k.stride(1), bank.stride(0) if kc else 0]
    cb = max(16, triton.next_power_of_2(triton.cdiv(max(channels, 1), grid[0] * grid[1])))
    return grid, args, dict(DK=dk, DV=dv, KC=kc, CB=cb)
