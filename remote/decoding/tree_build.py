"""Draft trees from the drafter's per-position distributions, built on the drafter's device.

Contract: `best_first_tree(draft_logits, budget)` returns the `budget` most likely prefixes (fewer only when fewer
exist) under the drafter's product-of-marginals surrogate: a node at depth d (1-based) holding the rank-r token of
draft position d-1 scores the sum of log-probs along its path. The result is prefix-closed, ordered best first
(non-increasing score; on equal scores shallower first), so parents precede children, with the root (the last
committed token) at index 0 and not counted in the budget; its `path_lp` holds the scores. With `sizes`
(tree_budget=auto's buckets), `best_first_tree(draft_logits, budget, sizes)` also sets the tree's `expected`:
`predictions(path_lp, budget, sizes)`, what remote.decoding.auto_budget chooses from. `argmax_chain(draft_logits)` is
the DFlash chain: the argmax token at every position. Both return a `DeviceTree` (remote.tree) without reading
anything back to the host; its `ancestry()` is what a `Target` verifies against. `build_tree` / `chain_tree` return
the same trees as host lists (`Tree`, one copy) for offline tools. Non-goal: the per-node conditional distributions
(the drafter emits marginals, so every parent at depth d draws from the same depth-d top-k list).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from ..kernels import tree_search
from ..kernels.argmax import argmax_rows
from ..tree import Ancestry, DeviceTree, Tree


RANK_LIMIT = 4096      # candidates per tree level ranked pairwise (`_best`)


@dataclass(frozen=True)
class _Plan:
    """Static facts of the level-by-level search for one (depth, k, budget, device); see `_plan`."""

    levels: int                  # depths searched: min(depth, budget)
    real: int                    # kept slots holding a real prefix, all levels together
    parent: torch.Tensor         # [c] parent slot of each scored candidate (the same candidates at every level)
    rank: torch.Tensor           # [c] its token rank
    start: torch.Tensor          # [budget] scores of the virtual level above depth 1: 0 for slot 0, else -inf


@lru_cache(maxsize=64)
def _plan(depth_limit: int, k: int, budget: int, device: torch.device) -> _Plan:
    """Which candidates a level scores, built once per shape. Every level keeps `budget` slots sorted best first
    (slots without a real prefix score -inf), so the child (parent slot j, rank r) is outscored or tied by the
    (j+1)(r+1) - 1 children (j' <= j, r' <= r) and can only be among the best `budget` when (j+1)(r+1) <= budget:
    ~budget * ln(budget) candidates instead of budget * k."""
    pairs = [(j, r) for j in range(budget) for r in range(min(k, budget // (j + 1)))]
    levels, real, alive = min(depth_limit, budget), 0, 1
    for _ in range(levels):
        alive = min(budget, sum(1 for j, _ in pairs if j < alive))
        real += alive
    with torch.inference_mode(False):   # cached across calls, inside and outside inference mode
        as_long = lambda xs: torch.tensor(xs, dtype=torch.long, device=device)  # noqa: E731
        start = torch.full((budget,), float("-inf"), device=device)
        start[0] = 0.0
        return _Plan(levels, real, as_long([j for j, _ in pairs]), as_long([r for _, r in pairs]), start)


def _best(scores: torch.Tensor, budget: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`torch.topk(scores, budget)`; under torch.compile by ranking every candidate against every other (a [c, c]
    comparison) and scattering the first `budget` ranks into place (ties in index order), which inductor fuses
    into 7-17 us per tree level at budgets 16-512 against topk's 8-35 us (H200, bench/bench_kernels.py). Not
    compiled, the ranking's separate kernels are slower than topk (18-167 us); above RANK_LIMIT candidates (budgets
    over ~600) its [c, c] matrix outgrows its use."""
    if scores.shape[0] > RANK_LIMIT or not torch.compiler.is_compiling():
        return torch.topk(scores, budget)
    return ranked(scores, budget)


def ranked(scores: torch.Tensor, budget: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The best `budget` of `scores` [c >= budget] and their indices, best first, equal scores in index order."""
    n = scores.shape[0]
    index = torch.arange(n, device=scores.device)
    other, this = scores[None, :], scores[:, None]
    above = (other > this) | ((other == this) & (index[None] < index[:, None]))      # [c, c]: j outranks i
    rank = above.sum(dim=1).clamp_(max=budget)                   # rank >= budget: dropped into the spare slot
    best = scores.new_empty(budget + 1).scatter_(0, rank, scores)[:budget]
    pick = index.new_empty(budget + 1).scatter_(0, rank, index)[:budget]
    return best, pick


# How the best-first set is found without a heap: a prefix never scores above its parent (log-probs are <= 0), so the
# best `budget` prefixes of depth d+1 only ever extend kept prefixes of depth d. Depth by depth, children of the kept
# prefixes of depth d are scored and the best `budget` are kept (only children that can make it are scored, see
# `_plan`), then one stable sort over all kept prefixes picks the best `budget`. The kept sets hold the best `budget`
# prefixes' scores (a prefix dropped at some depth has `budget` kept prefixes scoring at least as much), so the tree
# is the heap's up to the order of equal scores. Every shape is fixed by (depth, vocab, budget): nothing waits for
# data, and the step can be captured in a graph. On CUDA (with Triton) the levels, the final order and the ancestry
# run as one kernel (remote.kernels.tree_search); these torch ops are the reference and the CPU path.
def best_first_tree(draft_logits: torch.Tensor, budget: int, sizes: tuple[int, ...] = ()) -> DeviceTree:
    """Best-first tree of at most `budget` nodes from `draft_logits` [D, V] (row d predicts depth d+1)."""
    depth_limit, vocab = draft_logits.shape
    k = min(budget, vocab)
    plan = _plan(depth_limit, k, budget, draft_logits.device)
    if tree_search.available(draft_logits.device):
        return kernel_tree(draft_logits, budget, k, plan, tuple(sizes))
    tree = torch_tree(draft_logits, budget, k, plan)
    if sizes:
        tree.expected = predictions(tree.path_lp, budget, sizes)
    return tree


def kernel_tree(draft_logits: torch.Tensor, budget: int, k: int, plan: _Plan, sizes: tuple[int, ...]) -> DeviceTree:
    """`best_first_tree` by remote.kernels.tree_search (CUDA): the draft top-k (two kernels) and the whole search,
    the predictions included (one)."""
    top_lp, top_ids = tree_search.top_k(draft_logits, k)                                        # [D, k] each
    # without buckets the kernel still writes one prediction (its own size's), unread: one kernel for both uses
    tokens, parents, depth, ancestors, path_lp, expected = tree_search.build(
        top_lp, top_ids, plan.parent, plan.rank, _sizes(sizes or (budget,), draft_logits.device), budget,
        plan.levels, min(budget, plan.real))
    return DeviceTree(tokens=tokens, parents=parents[1:], depths=depth[1:], height=plan.levels + 1,
                      built=Ancestry(parents, depth, ancestors, False), path_lp=path_lp,
                      expected=expected if sizes else None)


@lru_cache(maxsize=64)
def _sizes(sizes: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """The buckets on the device, made on a step's first, uncaptured run (a host list copied to the device cannot
    be captured)."""
    with torch.inference_mode(False):
        return torch.tensor(sizes, dtype=torch.long, device=device)


def predictions(path_lp: torch.Tensor, budget: int, sizes: tuple[int, ...]) -> torch.Tensor:
    """Expected accepted drafted tokens (thousandths, long) of a best-first tree of each of `sizes` up to `budget`,
    -1 past it, from one step's tree of `budget` nodes whose path log-probs, best first, are `path_lp` [n] (n <
    budget: the tree holds every prefix there is, and no larger tree adds any): the mass of each size's first
    nodes. The torch path's; the CUDA kernel writes the same in the tree's own launch (each small kernel costs a
    captured step ~2 us, and these ride in every step of an auto run)."""
    weights, bias = _selector(path_lp.shape[0], budget, tuple(sizes), path_lp.device)
    return torch.addmv(bias, weights, path_lp.float().exp()).long()


@lru_cache(maxsize=64)
def _selector(n: int, budget: int, sizes: tuple[int, ...], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """[K, n] float32: 1000 where node i counts towards bucket k's E, and [K]: 0.5 (truncation rounds) or -1 past
    the tree. Made on the step's first, uncaptured run, as `_sizes`."""
    weights, bias = torch.zeros(len(sizes), n), torch.full((len(sizes),), 0.5)
    for k, c in enumerate(sizes):
        if c <= budget or n < budget:
            weights[k, :min(c, n)] = 1000.0
        else:
            bias[k] = -1.0
    return weights.to(device), bias.to(device)


def torch_tree(draft_logits: torch.Tensor, budget: int, k: int, plan: _Plan) -> DeviceTree:
    """`best_first_tree` in torch ops (any device; the kernel's reference)."""
    top_lp, top_ids = tree_search.torch_top_k(draft_logits, k)                                  # [D, k] each
    # Finite floor for impossible tokens, so that every real prefix outranks an empty (-inf) slot.
    gains = top_lp[: plan.levels].index_select(1, plan.rank).clamp(min=-1e30)                # [L, c]
    scores, picks = [plan.start], []
    for gain in gains.unbind(0):     # index_select / unbind: tensor __getitem__ costs more host time per level
        best, pick = _best(scores[-1].index_select(0, plan.parent).add_(gain), budget)           # [budget]
        scores.append(best)
        picks.append(pick)
    n = min(budget, plan.real)
    # Stable over the level-major slots: equal scores keep the shallower first, so a parent (whose score is >= its
    # child's) always precedes its child and the chosen set is prefix-closed even under ties.
    path_lp, chosen = torch.sort(torch.cat(scores[1:]), descending=True, stable=True)
    path_lp, chosen = path_lp[:n], chosen[:n]                                                  # [n] slots
    level, pick = chosen // budget, torch.cat(picks)[chosen]
    tokens = top_ids[level, plan.rank[pick]]
    # Parent slot -> its verify index (1 + its position in `chosen`); depth-1 nodes hang off the root.
    verify_index = torch.zeros(plan.levels * budget, dtype=torch.long, device=chosen.device)
    verify_index[chosen] = torch.arange(1, n + 1, device=chosen.device)
    above = (level - 1).clamp(min=0) * budget + plan.parent[pick]
    parents = torch.where(level == 0, 0, verify_index[above])
    return DeviceTree(tokens=tokens, parents=parents, depths=level + 1, height=plan.levels + 1, path_lp=path_lp)


def argmax_chain(draft_logits: torch.Tensor) -> DeviceTree:
    """The DFlash chain: argmax of every row of `draft_logits` [D, V], each node the child of the previous. Its
    tokens in one launch on CUDA (remote.kernels.argmax; torch's reduction took 8.8 us of a 14.6-us DFlash build on
    the demo pairs: one H200, 2026-12-04, `python3 bench/bench_methods.py $Q3 --temperatures 0 --num-prompts 4
    --budgets 31 --phase-kernels`) and its shape made once (`_chain`), where it was five launches a step."""
    depth = draft_logits.shape[0]
    parents, depths, ancestry = _chain(depth, draft_logits.device)
    return DeviceTree(tokens=argmax_rows(draft_logits), parents=parents, depths=depths, height=depth + 1,
                      chain=True, built=ancestry)


@lru_cache(maxsize=16)
def _chain(depth: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, Ancestry]:
    """A chain of `depth` drafted nodes: their parents and depths (verify index space) and the ancestry of root +
    nodes. Constants, made on a step's first, uncaptured run (as `_sizes`) and only read after."""
    with torch.inference_mode(False):
        index = torch.arange(depth, device=device)
        return index, index + 1, Ancestry.chain_of(depth + 1, device)


def build_tree(draft_logits: torch.Tensor, budget: int) -> Tree:
    """`best_first_tree` as host lists."""
    return best_first_tree(draft_logits, budget).host()


def chain_tree(draft_logits: torch.Tensor) -> Tree:
    """`argmax_chain` as host lists."""
    return argmax_chain(draft_logits).host()
