"""The gated delta rule over a token tree as one Triton kernel (CUDA): every node's output from its parent's
recurrent state, and, where asked, every node's state, for one GDN layer in one launch.

Contract: `tree_recurrence(q, k, v, g, beta, state, ancestors, depth, keep)` -> (out [N, HV, Dv] in v's dtype,
states [N, HV, Dk, Dv] float32 or None) for the N nodes whose rows of the tree's `ancestors` [N, H] and `depth`
[N] are given, from the inputs of all T tree nodes: q, k [T, HV, Dk] raw (l2-normalised here, q scaled by Dk^-0.5,
as fla's `use_qk_l2norm_in_kernel`), v [T, HV, Dv], g (log decay) and beta [T, HV], state [HV, Dk, Dv] float32 (the
committed one). Row i of `ancestors` / `depth` names its node itself (ancestors[i, depth[i]]), so any rows of a
tree's may be passed (commit recomputes one node's state). Same arithmetic order as fla's fused-recurrent kernel,
so a chain agrees with it to float32 rounding. `saved` (without `keep`): [T, HV, Dk + Dv + 2] float32
(`saved_width`), where each node given writes its own raw k, v, g and beta, in that order; remote.kernels.gdn_install
recomputes the accepted node's state from them (`path_state`, the same steps in the same order: the same bits).
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
    def path_state(k, v, g, beta, state, ancestors, depth, node, H, head, k_t, k_h, v_t, v_h, g_t, g_h, dk, dv,
                   in_k, in_v, DV: tl.constexpr, HP: tl.constexpr):
        """The state [BK, BV] (value columns `dv`) after the path of row `node` of `ancestors` [., H] / `depth` (the
        node's ancestors, then itself) from `state` (head `head`'s, [Dk, Dv] float32): every path row's inputs in
        one round of loads (not one dependent round a step), then the steps in registers. k / v rows at
        `row * k_t + head * k_h`, g / beta at `row * g_t + head * g_h`."""
        d = tl.load(depth + node)
        hp = tl.arange(0, HP)
        on = hp <= d
        path = tl.load(ancestors + node * H + hp, mask=on, other=0)
        ks = tl.load(k + path[:, None] * k_t + head * k_h + dk[None, :], mask=on[:, None] & in_k[None, :],
                     other=0.0).to(tl.float32)
        ks = ks / tl.sqrt(tl.sum(ks * ks, 1) + 1e-6)[:, None]
        vs = tl.load(v + path[:, None] * v_t + head * v_h + dv[None, :], mask=on[:, None] & in_v[None, :],
                     other=0.0).to(tl.float32)
        decay = tl.exp(tl.load(g + path * g_t + head * g_h, mask=on, other=0.0).to(tl.float32))
        betas = tl.load(beta + path * g_t + head * g_h, mask=on, other=0.0).to(tl.float32)
        s = tl.load(state + dk[:, None] * DV + dv[None, :], mask=in_k[:, None] & in_v[None, :], other=0.0)
        for step in range(d + 1):
            at = hp == step
            kk = tl.sum(tl.where(at[:, None], ks, 0.0), 0)
            s *= tl.sum(tl.where(at, decay, 0.0), 0)
            vv = (tl.sum(tl.where(at[:, None], vs, 0.0), 0) - tl.sum(s * kk[:, None], 0)) \
                * tl.sum(tl.where(at, betas, 0.0), 0)
            s += kk[:, None] * vv[None, :]
        return s

    # Run through the sequence kernels (remote.models.gdn's torch/fla path), a tree verify gathers five [N, H, ...]
    # path tensors, materialises N copies of the committed state and gathers each node's output back (~8 kernels a
    # layer), and commit recomputes the accepted path (~10 more). This kernel took the hybrid demo pair's graphed
    # DDTree-64 commit from 0.41 to 0.14 ms and its verify from 1.46 to 1.34 ms (one H200, 2026-11-29, `python3
    # bench/bench_methods.py $Q35 --temperatures 0 --num-prompts 24 --max-new-tokens 128 --budgets 32,64 --ar-again
    # --phase-kernels`). A program (node, value head, block of BLOCK_V value columns) loads its node's path
    # (`ancestors`, `depth` of remote.tree.Ancestry) in one round of loads, runs the steps up to the node's own depth
    # in registers, and with `keep` writes the node's state out, so that commit only copies it; with `saved` it
    # writes the node's inputs instead (k, v, g, beta: Dk + Dv + 2 floats a head, not Dk x Dv).
    @triton.jit
    def _tree_gdn_kernel(q, k, v, g, beta, state, ancestors, depth, out, states, HV, H, q_t, q_h, k_t, k_h, v_t,
                         v_h, scale, DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                         HP: tl.constexpr, KEEP: tl.constexpr, SAVE: tl.constexpr):
        block, nh = tl.program_id(0), tl.program_id(1)
        node, head = nh // HV, nh % HV
        dk = tl.arange(0, BK)
        dv = block * BV + tl.arange(0, BV)
        in_k, in_v = dk < DK, dv < DV
        s = path_state(k, v, g, beta, state + head * DK * DV, ancestors, depth, node, H, head, k_t, k_h, v_t, v_h, HV,
                       1, dk, dv, in_k, in_v, DV, HP)
        me = tl.load(ancestors + node * H + tl.load(depth + node))        # the node's own row: its path's last
        qq = tl.load(q + me * q_t + head * q_h + dk, mask=in_k, other=0.0).to(tl.float32)
        qq = qq / tl.sqrt(tl.sum(qq * qq) + 1e-6) * scale
        o = tl.sum(s * qq[:, None], 0)
        tl.store(out + nh * DV + dv, o.to(out.dtype.element_ty), mask=in_v)
        if KEEP:
            # Streaming (evict-first): commit reads one node's state of N, and at small widths N states a layer
            # would push the weights out of L2 for the rest of the step and the next one
            tl.store(states + nh * DK * DV + dk[:, None] * DV + dv[None, :], s,
                     mask=in_k[:, None] & in_v[None, :], cache_modifier=".cs")
        if SAVE:
            # this node's raw inputs, as path_state loads them: each program its value columns, the first also k,
            # g and beta
            row = states + (me * HV + head) * (DK + DV + 2)
            tl.store(row + DK + dv, tl.load(v + me * v_t + head * v_h + dv, mask=in_v, other=0.0).to(tl.float32),
                     mask=in_v)
            if block == 0:
                tl.store(row + dk, tl.load(k + me * k_t + head * k_h + dk, mask=in_k, other=0.0).to(tl.float32),
                         mask=in_k)
                tl.store(row + DK + DV, tl.load(g + me * HV + head).to(tl.float32))
                tl.store(row + DK + DV + 1, tl.load(beta + me * HV + head).to(tl.float32))


# Blocking: value columns a program holds, and its warps. At the demo's widths 16 / 1 was fastest or within 10% of it
# for a DFlash chain of 16 and trees of 32 and 64 nodes; at Qwen3.6-27B's it took a chain of 16 from fla's 8 columns'
# 81 us to 51 and 64 nodes from 186 to 114 (32 columns: 51 and 95; one H200, 2026-11-30, `python
# bench/bench_kernels.py --kinds gdn`).
BLOCK_V = 16
NUM_WARPS = 1


def blocking(dk: int, dv: int) -> tuple[int, int]:
    """(BK, BV) of a program: the whole key dimension, BLOCK_V value columns (what path_state's callers share, so
    that a recomputed state has the bits of a kept one)."""
    return triton.next_power_of_2(dk), min(triton.next_power_of_2(dv), BLOCK_V)


def saved_width(dk: int, dv: int) -> int:
    """Floats a head of one node's saved inputs: raw k, v, g and beta."""
    return dk + dv + 2


def tree_recurrence(q, k, v, g, beta, state, ancestors, depth, keep: bool, states: torch.Tensor | None = None,
                    saved: torch.Tensor | None = None):
    """See the module docstring; `states`: where to keep the node states (contiguous [N, HV, Dk, Dv] float32, e.g.
    a layer's slice of remote.models.gdn_stack's), else they are allocated; `saved` (contiguous, not with `keep`):
    where the nodes' inputs go. Runs under Triton's interpreter on CPU tensors too (TRITON_INTERPRET=1, tests). The
    blocking (BLOCK_V, NUM_WARPS) is read at every call, so bench/bench_kernels.py can time others."""
    if not (q.stride(-1) == k.stride(-1) == v.stride(-1) == 1):
        raise ValueError("tree_recurrence needs q, k, v contiguous in their last dimension")
    if keep and saved is not None:
        raise ValueError("tree_recurrence keeps node states or saves node inputs, not both")
    n, (hv, dk), dv = ancestors.shape[0], q.shape[1:], v.shape[-1]     # n: the rows of the tree asked for
    out = torch.empty(n, hv, dv, dtype=v.dtype, device=v.device)
    if keep and states is None:
        states = torch.empty(n, hv, dk, dv, dtype=torch.float32, device=v.device)
    elif not keep:
        states = None
    bk, bv = blocking(dk, dv)
    g, beta, state, ancestors, depth = (x.contiguous() for x in (g, beta, state, ancestors, depth))
    _tree_gdn_kernel[(triton.cdiv(dv, bv), n * hv)](
        q, k, v, g, beta, state, ancestors, depth, out, states if keep else saved if saved is not None else out, hv,
        ancestors.shape[1], q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), dk ** -0.5,
        DK=dk, DV=dv, BK=bk, BV=bv, HP=triton.next_power_of_2(ancestors.shape[1]), KEEP=keep,
        SAVE=saved is not None, num_warps=NUM_WARPS)
    return out, states


_ONE_NODE: dict = {}        # device -> (ancestors [[0]], depth [0]): a one-node tree, made once (not in a capture)


def token_step(q, k, v, g, beta, state: torch.Tensor) -> torch.Tensor:
    """One token from `state` [1, HV, Dk, Dv] float32, which it advances in place: q, k [1, 1, HV, Dk], v [1, 1,
    HV, Dv], g, beta [1, 1, HV] -> out [1, 1, HV, Dv] in v's dtype. The tree kernel over a one-node tree, keeping
    that node's state into `state` itself: each program reads its block of it before writing that block. (AR's GDN
    step where flash-linear-attention is not installed: one launch, where transformers' torch step is ~15.) `state`
    must be contiguous: the kernel writes it as such."""
    if state.device not in _ONE_NODE:
        _ONE_NODE[state.device] = (torch.zeros(1, 1, dtype=torch.long, device=state.device),
                                   torch.zeros(1, dtype=torch.long, device=state.device))
    out, _ = tree_recurrence(q[0], k[0], v[0], g[0], beta[0], state[0], *_ONE_NODE[state.device], keep=True,
                             states=state)
    return out[None]
