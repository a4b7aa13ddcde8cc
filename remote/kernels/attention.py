"""Attention of a decoding step's few queries over a static cache, with an explicit mask, as one Triton kernel.

Contract: `attention(q, k, v, mask, scale)`: q [1, Hq, Q, D] (any strides), k / v [1, Hkv, K, D], Hq a multiple
of Hkv, mask [Q or 1, K] bool (True = may attend) or additive float -> [1, Q, Hq, D] contiguous, q's dtype; every
query must see at least one row. float32 inputs multiply in full precision (no TF32). `available(q)` says whether
the captured steps use it (CUDA, Triton, head size a power of two from 16 to MAX_HEAD: the kernel is tested up to
128, but at Qwen3-8B widths, one program per K/V head for an AR query, its speed is unmeasured). Under
torch.compile it is an opaque op (`torch.library.triton_op`). `attention_interpreted` runs the kernel under
Triton's interpreter (TRITON_INTERPRET=1, CPU tensors) for tests. Non-goal: prefill-sized query counts
(transformers' SDPA runs those).
"""
from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:          # CPU-only installs: SDPA only
    triton = None

# Why: a captured step attends with a per-step mask (the committed rows, and inside a tree each node's ancestors).
# cuDNN's masked SDPA took 24 us a layer for a 129-node verify and 9 us for one AR query on the demo target, and the
# code around it copies the mask once per layer (the query heads sharing a K/V head stacked), the queries (stacking)
# and the output (back to [Q, heads]): three more kernels a layer. Here one program per (K/V head, block of stacked
# queries) reads the queries, the K/V rows and the mask where they lie and writes the output in the layout the
# caller needs; an online softmax over blocks of K/V rows, skipping the blocks no query of the program sees (a static
# cache's rows past the step: their cost is then a mask read, not K/V reads, so a cache reserved for a larger budget,
# as tree_budget=auto's is, costs a smaller step little): 6.8 us a layer for AR, 10.8 / 15.8 for 33 / 129 tree nodes
# (the demo's replayed steps, one H200, 2026-11-30, `python3 bench/bench_methods.py $Q3 --temperatures 0
# --num-prompts 6 --max-new-tokens 128 --budgets 32,64 --ar-again --stock-generate`, its phase split). With few
# programs (an AR query: one a K/V head) each walked every block of a reserved cache in turn (9.7 us a layer for the
# demo's AR; one H200, 2026-12-04, `gpu_suite.sh q3_kernels`), so the rows are now split across programs (`_splits`,
# about SPREAD programs a launch) and a second kernel merges the splits' partial softmaxes: at the demo's widths, 1 /
# 32 / 64 queries over 320 rows 10.6 / 11.0 / 11.1 -> 6.8 / 7.1 / 8.1 us, over 1024 rows 30.8 / 29.7 / 31.5 -> 11.6
# / 10.0 / 12.3 (cuDNN: 19.5-24; one H200, 2026-12-04, `python3 bench/bench_kernels.py --preset demo-qwen3 --caps
# 320,1024 --queries 1,16,32,64 --kinds attention`). The drafter attends through it too, over its static cache with
# the block's rows in it (remote.models.static_cache.StaticDrafterKV; tried on the concatenated cache on 2026-11-30,
# it had cost inductor more fusions than it saved).
BLOCK_M = 16     # stacked query rows a program holds (tl.dot's smallest M)
BLOCK_N = 64     # K/V rows per iteration
SPREAD = 64      # programs a launch aims at: the K/V rows are split when heads x query blocks are fewer


MAX_HEAD = 64    # where it was measured faster than SDPA (the demo targets); larger heads keep SDPA until measured


def available(q: torch.Tensor) -> bool:
    return serves(q.device, q.shape[-1])


def serves(device: torch.device, head_dim: int) -> bool:
    """Whether captured steps attend with this kernel at this head size on `device` (see `available`)."""
    d = head_dim
    return triton is not None and device.type == "cuda" and 16 <= d <= MAX_HEAD and d & (d - 1) == 0


if triton is not None:
    @triton.jit
    def _attention_kernel(q, k, v, mask, out, part, part_acc, q_len, kv_len, groups, scale, per,
                          sq_h, sq_m, sk_h, sk_n, sv_h, sv_n, sm_m, sm_n, so_m, so_h,
                          ADDITIVE: tl.constexpr, IEEE: tl.constexpr, D: tl.constexpr,
                          BM: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr):
        """Program (K/V head, block of stacked queries, split): the split's `per` rows; without SPLIT (one split)
        the output, with it the split's running max, sum and unnormalised output for `_combine_kernel`."""
        head, block, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        r = block * BM + tl.arange(0, BM)             # stacked row: group member r // q_len, query r % q_len
        live = r < groups * q_len
        member, query = r // q_len, r % q_len
        qh = head * groups + member                   # the query head
        d = tl.arange(0, D)
        qs = tl.load(q + qh[:, None] * sq_h + query[:, None] * sq_m + d[None, :], mask=live[:, None], other=0.0)
        best = tl.full([BM], -1.0e30, tl.float32)     # finite: a fully masked block leaves the sums as they are
        total = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, D], tl.float32)
        for start in range(split * per, tl.minimum(kv_len, split * per + per), BN):
            n = start + tl.arange(0, BN)
            inside = n < kv_len
            where = live[:, None] & inside[None, :]
            m = tl.load(mask + query[:, None] * sm_m + n[None, :] * sm_n, mask=where, other=0)
            if ADDITIVE:
                seen = where & (m.to(tl.float32) > -1.0e30)
            else:
                seen = where & (m != 0)
            # A block no query sees adds exactly nothing (its weights are exp(-inf) = 0, or exp of < -1e30 past a
            # running max >= -1e30): skipped, a static cache's unwritten rows cost a mask read, not K/V reads.
            if tl.max(seen.to(tl.int32)) > 0:
                ks = tl.load(k + head * sk_h + n[:, None] * sk_n + d[None, :], mask=inside[:, None], other=0.0)
                if IEEE:
                    s = tl.dot(qs, tl.trans(ks), input_precision="ieee") * scale
                else:
                    s = tl.dot(qs, tl.trans(ks)) * scale
                s = s.to(tl.float32)         # inductor may hand `scale` over as a float64
                if ADDITIVE:
                    s = tl.where(where, s + m.to(tl.float32), float("-inf"))
                else:
                    s = tl.where(seen, s, float("-inf"))
                now = tl.maximum(best, tl.max(s, 1))
                p = tl.exp(s - now[:, None])
                fade = tl.exp(best - now)
                total = total * fade + tl.sum(p, 1)
                vs = tl.load(v + head * sv_h + n[:, None] * sv_n + d[None, :], mask=inside[:, None], other=0.0)
                if IEEE:
                    acc = acc * fade[:, None] + tl.dot(p.to(vs.dtype), vs, input_precision="ieee")
                else:
                    acc = acc * fade[:, None] + tl.dot(p.to(vs.dtype), vs)
                best = now
        if SPLIT:
            slot = (split * tl.num_programs(0) + head) * tl.num_programs(1) * BM + r      # [BM]
            tl.store(part + slot * 2, best)
            tl.store(part + slot * 2 + 1, total)
            tl.store(part_acc + slot[:, None] * D + d[None, :], acc)
        else:
            acc = acc / total[:, None]
            tl.store(out + query[:, None] * so_m + qh[:, None] * so_h + d[None, :], acc.to(out.dtype.element_ty),
                     mask=live[:, None])

    @triton.jit
    def _combine_kernel(part, part_acc, out, q_len, groups, splits, so_m, so_h, D: tl.constexpr, BM: tl.constexpr):
        """Program (K/V head, block of stacked queries): its splits' partial softmaxes merged (a split no query
        saw has max -1e30 and sum 0: weight 0) and the output written."""
        head, block = tl.program_id(0), tl.program_id(1)
        r = block * BM + tl.arange(0, BM)
        live = r < groups * q_len
        member, query = r // q_len, r % q_len
        qh = head * groups + member
        d = tl.arange(0, D)
        heads, rows = tl.num_programs(0), tl.num_programs(1) * BM
        top = tl.full([BM], -1.0e30, tl.float32)
        for split in range(0, splits):
            top = tl.maximum(top, tl.load(part + ((split * heads + head) * rows + r) * 2))
        total = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, D], tl.float32)
        for split in range(0, splits):
            slot = (split * heads + head) * rows + r
            weight = tl.exp(tl.load(part + slot * 2) - top)
            total += weight * tl.load(part + slot * 2 + 1)
            acc += weight[:, None] * tl.load(part_acc + slot[:, None] * D + d[None, :])
        acc = acc / total[:, None]
        tl.store(out + query[:, None] * so_m + qh[:, None] * so_h + d[None, :], acc.to(out.dtype.element_ty),
                 mask=live[:, None])


def _launch(wrap, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float):
    q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))    # rows are read as D in a run
    _, heads, q_len, dim = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    groups = heads // kv_heads
    out = torch.empty(1, q_len, heads, dim, dtype=q.dtype, device=q.device)
    mask = mask.view(torch.uint8) if mask.dtype == torch.bool else mask      # Triton loads bytes, not bools
    sm_m = mask.stride(0) if mask.shape[0] > 1 else 0                        # one row: shared by every query
    blocks = triton.cdiv(groups * q_len, BLOCK_M)
    splits, per = _splits(kv_len, kv_heads * blocks)
    part = part_acc = out                      # one split: the kernel writes `out` itself and never reads these
    if splits > 1:
        rows = kv_heads * blocks * BLOCK_M * splits
        part = torch.empty(rows, 2, dtype=torch.float32, device=q.device)       # each split's max and sum
        part_acc = torch.empty(rows, dim, dtype=torch.float32, device=q.device)
    wrap(_attention_kernel)[(kv_heads, blocks, splits)](
        q, k, v, mask, out, part, part_acc, q_len, kv_len, groups, scale, per,
        q.stride(1), q.stride(2), k.stride(1), k.stride(2), v.stride(1), v.stride(2), sm_m, mask.stride(1),
        out.stride(1), out.stride(2), ADDITIVE=mask.is_floating_point(), IEEE=q.dtype == torch.float32, D=dim,
        BM=BLOCK_M, BN=BLOCK_N, SPLIT=splits > 1, num_warps=4)
    if splits > 1:
        wrap(_combine_kernel)[(kv_heads, blocks)](part, part_acc, out, q_len, groups, splits, out.stride(1),
                                                  out.stride(2), D=dim, BM=BLOCK_M, num_warps=4)
    return out


def _splits(kv_len: int, programs: int) -> tuple[int, int]:
    """(splits, rows each): the K/V rows cut into splits of whole blocks so that the grid has about SPREAD
    programs (none for a grid that has them already, one block a split at most)."""
    blocks = triton.cdiv(kv_len, BLOCK_N)
    splits = max(1, min(blocks, SPREAD // programs))
    per = triton.cdiv(blocks, splits) * BLOCK_N
    return triton.cdiv(kv_len, per), per


if triton is not None:
    @torch.library.triton_op("ddtree::masked_attention", mutates_args=())
    def _op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
        return _launch(torch.library.wrap_triton, q, k, v, mask, scale)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """See the module docstring."""
    if mask.dtype == torch.bool and torch.compiler.is_compiling():
        mask = mask.to(torch.uint8)          # inductor cannot lower the op's bool -> uint8 view (torch.iinfo(bool))
    return _op(q, k, v, mask, scale)


def attention_interpreted(q, k, v, mask, scale):
    """`attention` without the op wrapper: Triton's interpreter on CPU tensors, for tests."""
    return _launch(lambda kernel: kernel, q, k, v, mask, scale)
