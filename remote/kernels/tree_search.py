"""`best_first_tree`'s level-by-level search as one Triton kernel (CUDA): the levels, the final best-first order,
the parents in verify index space and the ancestry the target verifies against.

Contract: `top_k(draft_logits, k)` -> the k best log-probs and token ids per row (two kernels where the chunks'
candidates fit TOP_K_MERGE: the demo's 4096 vocabulary up to k = 256). `build(top_lp, top_ids, parent, rank, sizes,
budget, levels, n)` -> (tokens [n], parents [n + 1], depth [n + 1], ancestors [n + 1, levels + 1], path_lp [n]: each
node's path log-prob, float32, expected [len(sizes)]: tree_budget=auto's predictions for trees of `sizes` nodes,
long, remote.decoding.tree_build.predictions) with the root at index 0 (parent -1): the tree
remote.decoding.tree_build's torch ops build, up to the order of equal scores (lower candidate index first here).
`available(device)` says whether they can run. Under torch.compile each is an opaque op (`torch.library.triton_op`).
`torch_top_k` is top_k in torch ops (the fallback, and tree_build's CPU path).
"""
from __future__ import annotations

import torch

from . import pow2

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU-only installs: tree_build keeps its torch ops
    triton = None


def available(device: torch.device) -> bool:
    return triton is not None and device.type == "cuda"


def _warps(length: int) -> int:
    """Warps of a CTA that keeps the best of `length` int64 keys: the search's slots (levels x budget), the top-k
    merge's candidates."""
    # Measured for the search (`tl.topk`), bushy tree / 15-deep spine at 2 / 4 / 8 / 16 warps: 256 slots (budget 15)
    # 4.0 / 3.8 / 4.0 / 4.9 and 15.0 / 14.4 / 16.0 / 19.0 us; 512 (budget 31) 7.8 / 6.3 / 6.4 / 7.3 and 21.9 / 19.6 /
    # 21.6 / 25.9; 1024 (budget 63) 26 / 19 / 13 / 14 and 85 / 62 / 39 / 45 (one H200, 2026-12-04, `python3
    # bench/bench_kernels.py --kinds tree --budgets 15,31,63`). 2048 (budget 128): 208 us at 4, 115 at 16, before the
    # early stop (one H200, 2026-11-29, `python bench/bench_kernels.py --kinds tree --budgets 32,64,128`). The merge
    # (budget 63: 512 candidates, 8 warps before) has not been timed apart.
    return 4 if length <= 512 else 8 if length <= 1024 else 16


if triton is not None:
    # tl.topk (a bitonic sort of k-wide blocks, then merges that halve the keys) arrived in Triton 3.x; without it
    # the full sort's first k keys
    HAS_TOPK = tl.constexpr(hasattr(tl, "topk"))

    @triton.jit
    def _top(keys, K: tl.constexpr):
        """The K largest of `keys` [N] (N and K powers of two), largest first."""
        if HAS_TOPK:
            return tl.topk(keys, K)
        else:
            # sorted descending, the first row of [N / K, K] is its column-wise max
            return tl.max(tl.reshape(tl.sort(keys, descending=True), [keys.shape[0] // K, K]), 0)

    @triton.jit
    def _key(score, tie):
        """int64 that orders like (score, tie): the float's bits made monotonic, above a 32-bit tie-break."""
        bits = score.to(tl.int32, bitcast=True)
        return (tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.int64) << 32) | tie.to(tl.int64)

    @triton.jit
    def _score(key):
        bits = (key >> 32).to(tl.int32)
        return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.float32, bitcast=True)

    # Why: in torch ops a tree of height 16 costs ~60 small kernels (per level a gather, an add and a topk with its
    # sort; then a stable sort, a dozen index ops and the ancestor chase): 0.38-0.46 ms of a 1.4-1.5 ms DDTree step on
    # the demo pair (one H200, 2026-11-29, the phase split of `bench/bench_methods.py $Q3`), as much as one AR
    # forward. Here one CTA does it all: each level scores the same candidates as remote.decoding.tree_build (`_plan`:
    # parent slot, token rank), sorts them in registers (score and candidate index packed into one int64 key, so equal
    # scores keep index order) and keeps the best `budget` there for the next level to gather from; the sort is the
    # cost (~1.3 us a level at budget 31; ranking by a [c, c] comparison instead was 6x slower: one H200, 2026-11-30,
    # `python3 bench/bench_kernels.py --kinds tree`).
    # The search stops at the first level past which no prefix can be chosen (every deeper one scores at most that
    # level's best plus the next level's best gain, and n kept prefixes score at least that): on the demo drafters'
    # trees after 3-4 of 15 levels (fp32 and bf16, 8 HumanEval prompts, a CPU simulation of 2026-11-30 that
    # docs/performance-history.md describes), which took the search at budget 31 from 22 us to 8 (a 15-deep spine
    # still runs every level: 28; one H200, 2026-11-30, `bench_kernels.py --kinds tree`). Each level's gains are
    # loaded a level ahead and its picks go to global memory rather than a register gather: the spine 28.6 -> 27.6 us
    # (one H200, 2026-12-04, `python3 bench/bench_kernels.py --kinds tree --budgets 31,63`). A level and the final
    # order take only the best keys they keep (`tl.topk`: k-wide sorted blocks merged, the losing half of the keys
    # dropped at each merge) instead of sorting every key, and the ancestry is binary-lifted: budget 31's search
    # 27.7 -> 19.6 us on a spine, 10.8 -> 6.3 on a bushy tree, each at its default warps (one H200, 2026-12-04,
    # `python3 bench/bench_kernels.py --kinds tree --budgets 15,31,63`). The top-k's two launches and the search stay
    # three: one launch in which a row's last chunk program merged the row and the last row merged ran the search
    # (atomic tickets, acquire-release) was 0.6-2.3 us slower a tree (budgets 15 / 31, bushy and spine; one H200,
    # 2026-12-04, `python3 bench/bench_kernels.py --kinds tree --budgets 15,31`): the tickets' fences cost more than
    # the launches they saved.
    @triton.jit
    def _tree_kernel(top_lp, top_ids, cand_parent, cand_rank, vindex, picks, tokens, parents, depths, ancestors,
                     path_lp, sizes, expected, K, C, B, levels, n, S, CP: tl.constexpr, KP: tl.constexpr,
                     SP: tl.constexpr, NK: tl.constexpr, NP: tl.constexpr, HP: tl.constexpr, LH: tl.constexpr,
                     ZP: tl.constexpr):
        neg = float("-inf")
        c = tl.arange(0, CP)                # the candidates (CP >= C >= B)
        live = c < C
        par = tl.load(cand_parent + c, mask=live, other=0)
        rank = tl.load(cand_rank + c, mask=live, other=0)
        b = tl.arange(0, KP)                # a level's kept slots (KP >= B): the best KP candidates, in order
        kept = b < B
        # Every level's kept scores in registers, level-major (slot = level * B + kept index); their candidates
        # go to `picks` (global, read after the search): no gather into registers a level
        s = tl.arange(0, SP)
        col = s % B
        scores = tl.full([SP], neg, tl.float32)
        # The level being searched lives in registers too: its parents' scores are gathered from the last level's.
        prev = tl.where(b == 0, 0.0, neg)   # the virtual level above depth 1: slot 0 is the root, the rest empty
        # finite floor for impossible tokens, so that every real prefix outranks an empty slot; each level's gains
        # and the next level's best gain are loaded one level ahead, so that their latency hides behind a sort
        gain = tl.maximum(tl.load(top_lp + rank, mask=live, other=0.0), -1e30)
        best_gain = tl.load(top_lp + K, mask=levels > 1, other=0.0)
        level = 0
        more = levels > 0
        while more:
            ahead = level + 1
            row = tl.minimum(ahead, levels - 1)          # past the last level: a row loaded and never used
            gain_ahead = tl.maximum(tl.load(top_lp + row * K + rank, mask=live, other=0.0), -1e30)
            best_ahead = tl.load(top_lp + (ahead + 1) * K, mask=ahead + 1 < levels, other=0.0)
            key = _top(_key(tl.where(live, tl.gather(prev, par, 0) + gain, neg), CP - 1 - c), KP)
            prev = tl.where(kept, _score(key), neg)
            tl.store(picks + level * B + b, CP - 1 - (key & 0xFFFFFFFF), mask=kept)
            scores = tl.where(s // B == level, tl.gather(prev, col, 0), scores)
            level = ahead
            # Stop once no deeper prefix can be chosen: every one scores at most `bound` (this level's best plus
            # the next level's best gain; a prefix under a dropped one is outscored by this level's kept), and n
            # prefixes at most this deep score at least that (on equal scores the shallower is chosen first).
            bound = tl.max(prev, 0) + tl.maximum(best_gain, -1e30)
            more = (level < levels) & (tl.sum((scores >= bound).to(tl.int32), 0) < n)
            gain, best_gain = gain_ahead, best_ahead
        # the best n prefixes of the levels searched; equal scores keep the shallower (level-major slot) first
        key = _top(_key(scores, SP - 1 - s), NK)
        slot = SP - 1 - (key & 0xFFFFFFFF)
        t = tl.arange(0, NK)                # the chosen prefixes, best first (NK >= n)
        chosen = t < n
        depth = slot // B
        tl.debug_barrier()                  # every level's picks stored
        pick = tl.load(picks + slot, mask=chosen & (depth < level), other=0)
        token = tl.load(top_ids + depth * K + tl.gather(rank, pick, 0), mask=chosen, other=0)
        tl.store(tokens + t, token, mask=chosen)
        lp = _score(key)
        tl.store(path_lp + t, lp, mask=chosen)
        # tree_budget=auto's predictions: each bucket's expected accepted tokens (thousandths, rounded) is the mass
        # of its first nodes, -1 for a bucket larger than this tree (unless the tree holds every prefix there is)
        z = tl.arange(0, ZP)
        size = tl.load(sizes + z, mask=z < S, other=1)
        mass = tl.cumsum(tl.where(chosen, tl.exp(lp), 0.0), 0)
        thousandths = tl.floor(tl.gather(mass, tl.maximum(tl.minimum(size, n) - 1, 0), 0) * 1000.0 + 0.5)
        tl.store(expected + z, tl.where((size > B) & (n >= B), -1, thousandths.to(tl.int64)), mask=z < S)
        tl.store(vindex + slot, t + 1, mask=chosen)
        tl.debug_barrier()
        above = tl.maximum(depth - 1, 0) * B + tl.gather(par, pick, 0)
        parent = tl.where(depth == 0, 0, tl.load(vindex + above, mask=chosen & (depth > 0), other=0))
        # Verify index v: the root is 0, chosen prefix s is s + 1. ancestors[v, d]: v's ancestor at depth d (dv - d
        # steps up), v itself from its own depth on; by binary lifting in registers, a hop of 2^b steps a round: a
        # 15-deep spine in 4 rounds, not 15 (the root is its own parent here)
        H = levels + 1
        v = tl.arange(0, NP).to(tl.int64)
        node = v <= n
        prior = tl.minimum(tl.maximum(v - 1, 0), NK - 1)
        pv = tl.where(node & (v > 0), tl.gather(parent, prior, 0), -1)
        dv = tl.where(node & (v > 0), tl.gather(depth + 1, prior, 0), 0)
        d = tl.arange(0, HP)
        steps = tl.maximum(dv[:, None] - d[None, :], 0)
        anc = tl.broadcast_to(v[:, None], [NP, HP])
        hop = tl.where(pv < 0, v, pv)
        for b in tl.static_range(LH):
            up = tl.gather(tl.broadcast_to(hop[:, None], [NP, HP]), anc, 0)
            anc = tl.where(((steps >> b) & 1) == 1, up, anc)
            hop = tl.gather(hop, hop, 0)
        tl.store(parents + v, pv, mask=node)
        tl.store(depths + v, dv, mask=node)
        tl.store(ancestors + v[:, None] * H + d[None, :], anc, mask=node[:, None] & (d[None, :] < H))

    @triton.jit
    def _top_k_chunk_kernel(logits, part_key, part_max, part_sum, V, per, stride, tie_top, CHUNK: tl.constexpr,
                            PER: tl.constexpr):
        """Stage 1, program (row, chunk): the chunk's best `per` keys, best first, its max and its sum of
        exp(x - max) (for the row's log-softmax)."""
        row, chunk, chunks = tl.program_id(0), tl.program_id(1), tl.num_programs(1)
        i = chunk * CHUNK + tl.arange(0, CHUNK)
        x = tl.load(logits + row * stride + i, mask=i < V, other=float("-inf")).to(tl.float32)
        top = tl.max(x, 0)
        safe = tl.where(top == float("-inf"), 0.0, top)           # an all -inf chunk adds nothing to the sum
        slot = row * chunks + chunk
        tl.store(part_max + slot, top)
        tl.store(part_sum + slot, tl.sum(tl.exp(x - safe), 0))
        key = _top(_key(x, tie_top - i), PER)
        c = tl.arange(0, PER)
        tl.store(part_key + slot * per + c, key, mask=c < per)

    @triton.jit
    def _top_k_merge_kernel(part_key, part_max, part_sum, top_lp, top_ids, K, chunks, per, tie_top,
                            MP: tl.constexpr, CP: tl.constexpr, KP: tl.constexpr):
        """Stage 2, program row: the K best of the chunks' keys, as log-probs and token ids."""
        row = tl.program_id(0)
        m = tl.arange(0, MP)
        key = tl.load(part_key + row * chunks * per + m, mask=m < chunks * per, other=-9223372036854775807 - 1)
        key = _top(key, KP)
        j = tl.arange(0, KP)
        c = tl.arange(0, CP)
        tops = tl.load(part_max + row * chunks + c, mask=c < chunks, other=float("-inf"))
        top = tl.max(tops, 0)
        sums = tl.load(part_sum + row * chunks + c, mask=c < chunks, other=0.0)
        log_sum = tl.log(tl.sum(tl.where(c < chunks, sums * tl.exp(tops - top), 0.0), 0))
        tl.store(top_lp + row * K + j, (_score(key) - top) - log_sum, mask=j < K)
        tl.store(top_ids + row * K + j, tie_top - (key & 0xFFFFFFFF), mask=j < K)


TOP_K_MERGE = 2048      # most candidates the merge stage sorts in one CTA (more: torch.topk)
# vocabulary entries a stage-1 program sorts: a [15, 4096] top-15 took 5.2 us at 256 or 512 a program, 6.3 at 1024,
# 15.9 at 4096, and 11-12 us in one launch of one program a row (the merge left out; one H200, 2026-12-04, `python3
# bench/bench_kernels.py --kinds tree --budgets 15,31,63`): the chunks' parallelism is worth the second launch
TOP_K_CHUNK = 512
TIE_TOP = 0x7FFFFFFF    # keys hold TIE_TOP - token id below the score: equal scores, the lower id first


def _top_k_shape(vocab: int, k: int, chunk: int = TOP_K_CHUNK) -> tuple[int, int]:
    """(chunks, per): the stage-1 chunks of a row, and the candidates each hands on."""
    return -(-vocab // chunk), min(k, chunk)


def _launch_top_k(wrap, logits, k: int, chunk: int = TOP_K_CHUNK):
    rows, vocab = logits.shape
    chunks, per = _top_k_shape(vocab, k, chunk)
    device = logits.device
    part_key = torch.empty(rows, chunks, per, dtype=torch.long, device=device)
    part_max = torch.empty(rows, chunks, dtype=torch.float32, device=device)
    part_sum = torch.empty_like(part_max)
    top_lp = torch.empty(rows, k, dtype=torch.float32, device=device)
    top_ids = torch.empty(rows, k, dtype=torch.long, device=device)
    wrap(_top_k_chunk_kernel)[(rows, chunks)](logits, part_key, part_max, part_sum, vocab, per, logits.stride(0),
                                             TIE_TOP, CHUNK=chunk, PER=pow2(per), num_warps=4)
    mp = pow2(chunks * per)
    wrap(_top_k_merge_kernel)[(rows,)](part_key, part_max, part_sum, top_lp, top_ids, k, chunks, per, TIE_TOP,
                                      MP=mp, CP=pow2(chunks), KP=pow2(k), num_warps=_warps(mp))
    return top_lp, top_ids


def _launch(wrap, top_lp, top_ids, parent, rank, sizes, budget: int, levels: int, n: int,
            num_warps: int | None = None):
    """Allocate and run; `wrap` is torch.library.wrap_triton inside the op, identity otherwise; `num_warps` other
    than the default for bench/bench_kernels.py."""
    device, k, c = top_lp.device, top_lp.shape[1], parent.shape[0]
    as_long = dict(dtype=torch.long, device=device)
    vindex, picks = torch.empty(levels * budget, **as_long), torch.empty(levels * budget, **as_long)
    tokens, parents, depths = torch.empty(n, **as_long), torch.empty(n + 1, **as_long), torch.empty(n + 1, **as_long)
    path_lp = torch.empty(n, dtype=torch.float32, device=device)
    ancestors = torch.empty(n + 1, levels + 1, **as_long)
    expected = torch.empty(sizes.shape[0], **as_long)
    sp = pow2(levels * budget)
    wrap(_tree_kernel)[(1,)](top_lp, top_ids, parent, rank, vindex, picks, tokens, parents, depths, ancestors, path_lp,
                             sizes, expected, k, c, budget, levels, n, sizes.shape[0], CP=pow2(c), KP=pow2(budget),
                             SP=sp, NK=pow2(n), NP=pow2(n + 1), HP=pow2(levels + 1), LH=levels.bit_length(),
                             ZP=pow2(sizes.shape[0]),
                             num_warps=num_warps or _warps(sp))
    return tokens, parents, depths, ancestors, path_lp, expected


if triton is not None:
    @torch.library.triton_op("ddtree::best_first_tree", mutates_args=())
    def _op(top_lp: torch.Tensor, top_ids: torch.Tensor, parent: torch.Tensor, rank: torch.Tensor,
            sizes: torch.Tensor, budget: int, levels: int, n: int
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return _launch(torch.library.wrap_triton, top_lp, top_ids, parent, rank, sizes, budget, levels, n)

    @torch.library.triton_op("ddtree::top_k", mutates_args=())
    def _top_k_op(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _launch_top_k(torch.library.wrap_triton, logits, k)


def torch_top_k(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.topk(torch.log_softmax(logits.float(), dim=-1), k, dim=-1)


def top_k(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-softmax of the k best, their ids) per row of `logits` [D, V], best first: torch.topk's result (up to
    the order of equal logits) in two kernels where the chunks' candidates fit TOP_K_MERGE (a [15, 4096] topk with
    k = 128 takes ~50 us in torch's two kernels): every 512-wide chunk of a row sorted by its own program, then
    the chunks' best merged per row."""
    chunks, per = _top_k_shape(logits.shape[1], k)
    if chunks * per > TOP_K_MERGE:
        return torch_top_k(logits, k)
    return _top_k_op(logits.contiguous(), k)


def build(top_lp: torch.Tensor, top_ids: torch.Tensor, parent: torch.Tensor, rank: torch.Tensor, sizes: torch.Tensor,
          budget: int, levels: int, n: int):
    """See the module docstring; top_lp [D, K] float32 and top_ids [D, K] long, each row best first."""
    return _op(top_lp.contiguous(), top_ids.contiguous(), parent, rank, sizes, budget, levels, n)


def build_interpreted(*args):
    """`build` without the op wrapper: Triton's interpreter (TRITON_INTERPRET=1) on CPU tensors, for tests."""
    return _launch(lambda kernel: kernel, *args)


def top_k_interpreted(logits: torch.Tensor, k: int, chunk: int = TOP_K_CHUNK):
    """`top_k`'s kernels under Triton's interpreter, for tests (a small `chunk` makes several chunks a row)."""
    return _launch_top_k(lambda kernel: kernel, logits.contiguous(), k, chunk)
