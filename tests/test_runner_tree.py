"""Tree building alone: best-first = the top-`budget` prefixes, prefix-closed, parents before children."""
from __future__ import annotations

import itertools

import pytest
import torch

from remote.tree import ancestor_mask, build_tree, chain_tree, depths_of


def _paths(tree):
    """Token path (root excluded) of every node, by verify index."""
    paths = {0: ()}
    for i, (tok, parent) in enumerate(zip(tree.tokens, tree.parents), start=1):
        paths[i] = paths[parent] + (tok,)
    return paths


def _brute_force(logits, budget):
    """All prefixes (depth >= 1) with their surrogate score, best `budget` by score."""
    lp = torch.log_softmax(logits.double(), -1)
    depth, vocab = lp.shape
    scored = []
    for d in range(1, depth + 1):
        for seq in itertools.product(range(vocab), repeat=d):
            scored.append((sum(lp[i, t].item() for i, t in enumerate(seq)), seq))
    scored.sort(key=lambda x: -x[0])
    return scored[:budget]


@pytest.mark.parametrize("budget", [1, 2, 5, 17, 60, 500])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree_is_the_best_prefixes(budget, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 5, generator=g) * 2                 # 5 + 25 + 125 = 155 possible prefixes
    tree = build_tree(logits, budget)
    best = _brute_force(logits, budget)
    assert tree.size == min(budget, 155)
    got = set(_paths(tree).values()) - {()}
    assert got == {seq for _, seq in best}                    # continuous scores: no ties


def test_tree_structure_and_children():
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(3))
    tree = build_tree(logits, 64)
    assert all(p < i for i, p in enumerate(tree.parents, start=1))              # parents precede children
    assert tree.depths == depths_of(tree.verify_parents())[1:]
    assert max(tree.depths) <= 6
    for i, (tok, parent) in enumerate(zip(tree.tokens, tree.parents), start=1):
        assert tree.children[parent][tok] == i                                  # siblings hold distinct tokens
    assert sum(len(c) for c in tree.children) == tree.size


def test_chain_is_the_argmax_path():
    logits = torch.randn(7, 30, generator=torch.Generator().manual_seed(4))
    tree = chain_tree(logits)
    assert tree.tokens == logits.argmax(-1).tolist()
    assert tree.verify_parents() == [-1, 0, 1, 2, 3, 4, 5, 6]


def test_ancestor_mask_matches_definition():
    logits = torch.randn(5, 9, generator=torch.Generator().manual_seed(5))
    parents = build_tree(logits, 40).verify_parents()
    mask = ancestor_mask(parents)
    for i in range(len(parents)):
        ancestors, j = {i}, parents[i]
        while j >= 0:
            ancestors.add(j)
            j = parents[j]
        assert {j for j in range(len(parents)) if mask[i, j]} == ancestors


def test_budget_one_is_the_top_token():
    logits = torch.randn(4, 10, generator=torch.Generator().manual_seed(6))
    tree = build_tree(logits, 1)
    assert tree.tokens == [int(logits[0].argmax())] and tree.parents == [0]
