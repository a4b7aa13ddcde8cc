"""`best_first_tree`'s level-by-level search as one Triton kernel (CUDA): the levels, the final best-first order,
the parents in verify index space and the ancestry the target verifies against.

Why: in torch ops a tree of height 16 costs ~60 small kernels (per level a gather, an add and a topk with its
sort; then a stable sort, a dozen index ops and the ancestor chase): 0.38-0.46 ms of a 1.4-1.5 ms DDTree step
on the demo pair (H200, remote.graph_split), as much as one AR forward. Here one CTA does it all: each level
scores the same candidates as remote.tree (`_plan`: parent slot, token rank), sorts them in registers (score and
candidate index packed into one int64 key, so equal scores keep index order) and keeps the best `budget`; a
barrier orders each level's stores before the next level's gathers.

Contract: `top_k(draft_logits, k)` -> the k best log-probs and token ids per row (one kernel for vocabularies
up to TOP_K_VOCAB). `build(top_lp, top_ids, parent, rank, budget, levels, n)` -> (tokens [n], parents [n + 1],
depth [n + 1], ancestors [n + 1, levels + 1]) with the root at index 0 (parent -1): the tree remote.tree's
torch ops build, up to the order of equal scores (lower candidate index first here). `available(device)` says
whether they can run. Under torch.compile each is an opaque op (`torch.library.triton_op`), kept as one kernel.
"""
from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU-only installs: remote.tree keeps its torch ops
    triton = None


def available(device: torch.device) -> bool:
    return triton is not None and device.type == "cuda"


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _warps(length: int, four_up_to: int) -> int:
    """Warps of the CTA that sorts `length` int64 keys (measured at these counts, H200, session 5)."""
    return 4 if length <= four_up_to else 8 if length <= 8192 else 16


if triton is not None:
    @triton.jit
    def _key(score, tie):
        """int64 that orders like (score, tie): the float's bits made monotonic, above a 32-bit tie-break."""
        bits = score.to(tl.int32, bitcast=True)
        return (tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.int64) << 32) | tie.to(tl.int64)

    @triton.jit
    def _score(key):
        bits = (key >> 32).to(tl.int32)
        return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.float32, bitcast=True)

    @triton.jit
    def _tree_kernel(top_lp, top_ids, cand_parent, cand_rank, scores, picks, vindex,
                     tokens, parents, depths, ancestors, K, C, B, levels, n,
                     CP: tl.constexpr, BP: tl.constexpr, SP: tl.constexpr, NP: tl.constexpr, HP: tl.constexpr):
        neg = float("-inf")
        H = levels + 1
        # the virtual level above depth 1: slot 0 is the root (score 0), the other slots are empty
        b = tl.arange(0, BP)
        tl.store(scores + b, tl.where(b == 0, 0.0, neg), mask=b < B)
        c = tl.arange(0, CP)
        live = c < C
        par = tl.load(cand_parent + c, mask=live, other=0)
        rank = tl.load(cand_rank + c, mask=live, other=0)
        tl.debug_barrier()
        for level in range(levels):
            prev = tl.load(scores + level * B + par, mask=live, other=neg)
            # finite floor for impossible tokens, so that every real prefix outranks an empty slot
            gain = tl.maximum(tl.load(top_lp + level * K + rank, mask=live, other=0.0), -1e30)
            key = tl.sort(_key(tl.where(live, prev + gain, neg), CP - 1 - c), descending=True)
            kept = c < B
            tl.store(scores + (level + 1) * B + c, _score(key), mask=kept)
            tl.store(picks + level * B + c, CP - 1 - (key & 0xFFFFFFFF), mask=kept)
            tl.debug_barrier()
        # the best n prefixes of all levels; equal scores keep the shallower (level-major slot order) first
        s = tl.arange(0, SP)
        key = tl.sort(_key(tl.load(scores + B + s, mask=s < levels * B, other=neg), SP - 1 - s), descending=True)
        slot = SP - 1 - (key & 0xFFFFFFFF)
        chosen = s < n
        level = slot // B
        pick = tl.load(picks + slot, mask=chosen, other=0)
        token = tl.load(top_ids + level * K + tl.load(cand_rank + pick, mask=chosen, other=0), mask=chosen, other=0)
        tl.store(tokens + s, token, mask=chosen)
        tl.store(vindex + slot, s + 1, mask=chosen)
        tl.store(depths + 1 + s, level + 1, mask=chosen)
        tl.store(depths + s, 0, mask=s == 0)
        tl.store(parents + s, -1, mask=s == 0)
        tl.debug_barrier()
        above = tl.maximum(level - 1, 0) * B + tl.load(cand_parent + pick, mask=chosen, other=0)
        parent = tl.where(level == 0, 0, tl.load(vindex + above, mask=chosen & (level > 0), other=0))
        tl.store(parents + 1 + s, parent, mask=chosen)
        # ancestors[i, d]: i's ancestor at depth d, i itself from its own depth on
        v = tl.arange(0, NP)
        node = v <= n
        d = tl.arange(0, HP)
        tl.store(ancestors + v[:, None] * H + d[None, :], v[:, None] + d[None, :] * 0,
                 mask=node[:, None] & (d[None, :] < H))
        tl.debug_barrier()
        depth = tl.load(depths + v, mask=node, other=0)
        up = v.to(tl.int64)
        for step in range(H):
            tl.store(ancestors + v * H + depth - step, up, mask=node & (depth - step >= 0))
            above_up = tl.load(parents + up, mask=node, other=-1)
            up = tl.where(above_up < 0, up, above_up)

    @triton.jit
    def _top_k_kernel(logits, top_lp, top_ids, V, K, stride, VP: tl.constexpr):
        """One row per program: log-softmax and the K best tokens, best first (lower token id first on ties)."""
        row = tl.program_id(0)
        i = tl.arange(0, VP)
        x = tl.load(logits + row * stride + i, mask=i < V, other=float("-inf")).to(tl.float32)
        top = tl.max(x, 0)
        log_sum = tl.log(tl.sum(tl.exp(x - top), 0))
        key = tl.sort(_key(x, VP - 1 - i), descending=True)
        tl.store(top_lp + row * K + i, (_score(key) - top) - log_sum, mask=i < K)
        tl.store(top_ids + row * K + i, VP - 1 - (key & 0xFFFFFFFF), mask=i < K)


TOP_K_VOCAB = 16384     # rows up to this wide are sorted in one CTA; wider ones go to torch.topk


def _launch_top_k(wrap, logits, k: int):
    rows, vocab = logits.shape
    top_lp = torch.empty(rows, k, dtype=torch.float32, device=logits.device)
    top_ids = torch.empty(rows, k, dtype=torch.long, device=logits.device)
    vp = _pow2(vocab)
    wrap(_top_k_kernel)[(rows,)](logits, top_lp, top_ids, vocab, k, logits.stride(0), VP=vp,
                                 num_warps=_warps(vp, 4096))
    return top_lp, top_ids


def _launch(wrap, top_lp, top_ids, parent, rank, budget: int, levels: int, n: int, num_warps: int | None = None):
    """Allocate and run; `wrap` is torch.library.wrap_triton inside the op, identity otherwise; `num_warps` other
    than the default for bench/bench_kernels.py."""
    device, k, c = top_lp.device, top_lp.shape[1], parent.shape[0]
    as_long = dict(dtype=torch.long, device=device)
    scores = torch.empty((levels + 1) * budget, dtype=torch.float32, device=device)
    picks, vindex = torch.empty(levels * budget, **as_long), torch.empty(levels * budget, **as_long)
    tokens, parents, depths = torch.empty(n, **as_long), torch.empty(n + 1, **as_long), torch.empty(n + 1, **as_long)
    ancestors = torch.empty(n + 1, levels + 1, **as_long)
    sp = _pow2(levels * budget)
    wrap(_tree_kernel)[(1,)](top_lp, top_ids, parent, rank, scores, picks, vindex, tokens, parents, depths, ancestors,
                             k, c, budget, levels, n, CP=_pow2(c), BP=_pow2(budget), SP=sp, NP=_pow2(n + 1),
                             HP=_pow2(levels + 1), num_warps=num_warps or _warps(sp, 2048))
    return tokens, parents, depths, ancestors


if triton is not None:
    @torch.library.triton_op("ddtree::best_first_tree", mutates_args=())
    def _op(top_lp: torch.Tensor, top_ids: torch.Tensor, parent: torch.Tensor, rank: torch.Tensor, budget: int,
            levels: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return _launch(torch.library.wrap_triton, top_lp, top_ids, parent, rank, budget, levels, n)

    @torch.library.triton_op("ddtree::top_k", mutates_args=())
    def _top_k_op(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _launch_top_k(torch.library.wrap_triton, logits, k)


def top_k(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-softmax of the k best, their ids) per row of `logits` [D, V], best first: torch.topk's result (up to
    the order of equal logits) in one kernel for vocabularies up to TOP_K_VOCAB (a [15, 4096] topk with k = 128
    takes ~50 us in torch's two kernels)."""
    if logits.shape[1] > TOP_K_VOCAB:
        return torch.topk(torch.log_softmax(logits.float(), dim=-1), k, dim=-1)
    return _top_k_op(logits.contiguous(), k)


def build(top_lp: torch.Tensor, top_ids: torch.Tensor, parent: torch.Tensor, rank: torch.Tensor, budget: int,
          levels: int, n: int):
    """See the module docstring; top_lp [D, K] float32 and top_ids [D, K] long, each row best first."""
    return _op(top_lp.contiguous(), top_ids.contiguous(), parent, rank, budget, levels, n)


def build_interpreted(*args):
    """`build` without the op wrapper: Triton's interpreter (TRITON_INTERPRET=1) on CPU tensors, for tests."""
    return _launch(lambda kernel: kernel, *args)


def top_k_interpreted(logits: torch.Tensor, k: int):
    """`top_k`'s kernel under Triton's interpreter, for tests."""
    return _launch_top_k(lambda kernel: kernel, logits.contiguous(), k)
