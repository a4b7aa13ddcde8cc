"""Draft trees from the drafter's per-position distributions.

Contract: `build_tree(draft_logits, budget)` returns the `budget` most likely prefixes (fewer only when fewer
exist) under the drafter's product-of-marginals surrogate: a node at depth d (1-based) holding the rank-r token
of draft position d-1 scores the sum of log-probs along its path. The result is prefix-closed and ordered so
that parents precede children, with the root (the last committed token) at index 0 and not counted in the
budget. `chain_tree(draft_logits)` is the DFlash chain: the argmax token at every position. Non-goal: the
per-node conditional distributions (the drafter emits marginals, so every parent at depth d draws from the
same depth-d top-k list).

Layout used everywhere (verify index space): index 0 = root, index i >= 1 = node i-1 of `tokens`.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch


@dataclass
class Tree:
    tokens: list[int]               # [n] token id of each non-root node
    parents: list[int]              # [n] verify index of each node's parent (0 = root); parents[i] <= i
    depths: list[int]               # [n] depth of each node, root = 0
    children: list[dict[int, int]]  # [n+1] per verify index: child token id -> child verify index

    @property
    def size(self) -> int:
        return len(self.tokens)

    def verify_parents(self) -> list[int]:
        """Parents in the Target's convention: [-1 (root on the committed prefix)] + node parents."""
        return [-1] + self.parents


def _empty() -> Tree:
    return Tree(tokens=[], parents=[], depths=[], children=[{}])


def _add(tree: Tree, token: int, parent: int, depth: int) -> int:
    index = len(tree.tokens) + 1
    tree.tokens.append(token)
    tree.parents.append(parent)
    tree.depths.append(depth)
    tree.children[parent][token] = index
    tree.children.append({})
    return index


def build_tree(draft_logits: torch.Tensor, budget: int) -> Tree:
    """Best-first tree of at most `budget` nodes from `draft_logits` [D, V] (row d predicts depth d+1)."""
    depth_limit, vocab = draft_logits.shape
    k = min(budget, vocab)
    log_probs = torch.log_softmax(draft_logits.float(), dim=-1)
    top_lp, top_ids = torch.topk(log_probs, k, dim=-1)          # [D, k] each, ranks sorted descending
    top_lp, top_ids = top_lp.tolist(), top_ids.tolist()          # one device->host copy
    tree = _empty()
    # Heap entries: (-score, tie-break counter, depth row, rank, parent verify index).
    # Popping the best prefix, then offering its next sibling and its best child, visits prefixes in
    # non-increasing score order, so the first `budget` pops are the best `budget` prefixes.
    heap = [(-top_lp[0][0], 0, 0, 0, 0)]
    counter = 1
    while heap and tree.size < budget:
        neg, _, row, rank, parent = heapq.heappop(heap)
        index = _add(tree, top_ids[row][rank], parent, row + 1)
        if rank + 1 < k:
            heapq.heappush(heap, (neg + top_lp[row][rank] - top_lp[row][rank + 1], counter, row, rank + 1, parent))
            counter += 1
        if row + 1 < depth_limit:
            heapq.heappush(heap, (neg - top_lp[row + 1][0], counter, row + 1, 0, index))
            counter += 1
    return tree


def chain_tree(draft_logits: torch.Tensor) -> Tree:
    """The DFlash chain: argmax of every row of `draft_logits` [D, V], each node the child of the previous."""
    tree = _empty()
    for depth, token in enumerate(draft_logits.argmax(dim=-1).tolist(), start=1):
        _add(tree, token, depth - 1, depth)
    return tree


def is_chain(parents: list[int]) -> bool:
    """True for parents == [-1, 0, 1, ..., N-2] (a chain hanging off the committed prefix)."""
    return all(p == i - 1 for i, p in enumerate(parents))


def depths_of(parents: list[int]) -> list[int]:
    """Depth of every node of `parents` (Target convention, -1 = on the prefix): roots have depth 0."""
    depths: list[int] = []
    for p in parents:
        depths.append(0 if p < 0 else depths[p] + 1)
    return depths


def ancestor_mask(parents: list[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """visible [N, N] bool: visible[i, j] is True iff j is i or an ancestor of i (Target convention)."""
    n = len(parents)
    depths = depths_of(parents)
    parent_t = torch.tensor(parents, dtype=torch.long)
    depth_t = torch.tensor(depths, dtype=torch.long)
    visible = torch.eye(n, dtype=torch.bool)
    for d in range(1, (max(depths) if depths else 0) + 1):    # one vectorised step per depth level
        rows = (depth_t == d).nonzero(as_tuple=True)[0]
        visible[rows] |= visible[parent_t[rows]]
    return visible.to(device)
