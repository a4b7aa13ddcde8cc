"""Tree building alone: best-first = the top-`budget` prefixes, prefix-closed, parents before children; the
device build against the reference heap; the device walk against a Python walk."""
from __future__ import annotations

import heapq
import itertools
import random

import pytest
import torch

from remote.decoding.loop import walk
from remote.decoding.tree_build import best_first_tree, build_tree, chain_tree
from remote.tree import Ancestry, ancestor_mask, depths_of


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


def _heap_tree(logits, budget):
    """Reference: the best-first heap over (score, rank) of the DDTree paper, as host lists."""
    lp = torch.log_softmax(logits.double(), -1)
    top_lp, top_ids = lp.topk(min(budget, lp.shape[1]), dim=-1)
    top_lp, top_ids = top_lp.tolist(), top_ids.tolist()
    tokens, parents, depths, heap, counter = [], [], [], [(-top_lp[0][0], 0, 0, 0, 0)], 1
    while heap and len(tokens) < budget:
        neg, _, row, rank, parent = heapq.heappop(heap)
        tokens.append(top_ids[row][rank]), parents.append(parent), depths.append(row + 1)
        if rank + 1 < len(top_lp[row]):
            heapq.heappush(heap, (neg + top_lp[row][rank] - top_lp[row][rank + 1], counter, row, rank + 1, parent))
            counter += 1
        if row + 1 < len(top_lp):
            heapq.heappush(heap, (neg - top_lp[row + 1][0], counter, row + 1, 0, len(tokens)))
            counter += 1
    return tokens, parents, depths


def _scores(tokens, parents, depths, logits):
    lp = torch.log_softmax(logits.double(), -1)
    score = [0.0]
    for tok, parent, depth in zip(tokens, parents, depths):
        score.append(score[parent] + lp[depth - 1, tok].item())
    return sorted(round(s, 6) for s in score[1:])


@pytest.mark.parametrize("seed", range(40))
def test_device_tree_equals_the_heap(seed):
    """Same nodes in the same order as the reference heap (continuous scores: no ties), on real drafter shapes."""
    g = torch.Generator().manual_seed(seed)
    depth, vocab = [(3, 5), (7, 30), (15, 64), (15, 300)][seed % 4]
    budget = [1, 3, 16, 64, 256, 1024][seed % 6]          # 1024: past RANK_LIMIT, topk selects
    logits = torch.randn(depth, vocab, generator=g) * [0.5, 2.0, 6.0][seed % 3]
    with torch.inference_mode():
        tree = best_first_tree(logits, budget)
    assert tree.tokens.device == logits.device and tree.height == min(depth, budget) + 1
    assert (tree.tokens.tolist(), tree.parents.tolist(), tree.depths.tolist()) == _heap_tree(logits, budget)


def test_ties_keep_the_tree_prefix_closed():
    """Peaked rows (log-prob exactly 0) make children tie with their parents, and equal siblings tie with each
    other: parents still precede children and the score multiset is the best one."""
    logits = torch.full((6, 10), -1e4)
    logits[:, 3] = 0.0
    logits[2, 5] = 0.0                                         # two equal tokens at depth 3
    logits[4, :] = 0.0                                         # a flat row: ten equal tokens at depth 5
    for budget in (1, 5, 12, 20, 60):
        tree = build_tree(logits, budget)
        assert all(p < i for i, p in enumerate(tree.parents, start=1))
        assert tree.depths == depths_of(tree.verify_parents())[1:]
        reference = _heap_tree(logits, budget)
        assert _scores(tree.tokens, tree.parents, tree.depths, logits) == _scores(*reference, logits)


@pytest.mark.parametrize("real, budget", [(4, 30), (2, 40)])
def test_masked_tokens_still_fill_the_budget(real, budget):
    """-inf logits (a masked vocabulary) give -inf log-probs: the best prefixes are the real ones, and when
    there are fewer real prefixes (2 + 4 + 8 + 16 = 30) than the budget, masked ones fill it as in the heap."""
    logits = torch.randn(4, 6, generator=torch.Generator().manual_seed(8))
    logits[:, real:] = float("-inf")
    tree = build_tree(logits, budget)
    assert tree.size == budget and all(p < i for i, p in enumerate(tree.parents, start=1))
    assert _scores(tree.tokens, tree.parents, tree.depths, logits) == _scores(*_heap_tree(logits, budget), logits)


@pytest.mark.parametrize("seed", range(5))
def test_ancestry_of_device_tensors_equals_host_lists(seed):
    rng = random.Random(seed)
    parents = [-1] + [rng.randrange(i) for i in range(1, 30)]
    host = Ancestry.from_parents(parents)
    depth = torch.tensor(depths_of(parents))
    device = Ancestry.of(torch.tensor(parents), depth, host.height)
    assert torch.equal(device.ancestors, host.ancestors) and torch.equal(device.visible, host.visible)
    chain = Ancestry.from_parents(list(range(-1, 6)))
    assert chain.chain and torch.equal(chain.visible, torch.ones(7, 7, dtype=torch.bool).tril())
    built = Ancestry.of(torch.arange(-1, 6), torch.arange(7), 7)
    assert torch.equal(built.ancestors, chain.ancestors)


def _walk_reference(parents, nodes, samples):
    children = [dict() for _ in parents]
    for i, p in enumerate(parents[1:], start=1):
        children[p][nodes[i]] = i
    path = [0]
    while (child := children[path[-1]].get(samples[path[-1]])) is not None:
        path.append(child)
    return path, samples[path[-1]]


@pytest.mark.parametrize("seed", range(30))
def test_device_walk_equals_the_python_walk(seed):
    """Random best-first trees, targets that follow the tree for a random number of steps then leave it."""
    g = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    logits = torch.randn(6, 8, generator=g) * 3
    tree = best_first_tree(logits, rng.choice([1, 4, 16, 40]))
    host = tree.host()
    nodes = [rng.randrange(8)] + host.tokens
    samples = [rng.randrange(8) for _ in nodes]
    node = 0                                                    # steer the target along the tree for a while
    for _ in range(rng.randrange(7)):
        if not host.children[node]:
            break
        token, child = rng.choice(sorted(host.children[node].items()))
        samples[node], node = token, child
    accepted = walk(tree.ancestry(), torch.tensor(nodes), torch.tensor(samples))
    path, bonus = _walk_reference(host.verify_parents(), nodes, samples)
    assert accepted.path.tolist() == path and accepted.bonus.tolist() == [bonus]
    assert accepted.tokens == [nodes[i] for i in path[1:]] + [bonus]


@pytest.mark.parametrize("seed", range(4))
def test_ranked_selection_is_topk_with_ties_in_index_order(seed):
    """The compiled tree build's selection (`ranked`) against a stable sort, on scores with many ties and -inf."""
    from remote.decoding.tree_build import ranked

    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(-6, 0, (300,), generator=g).float()
    scores[torch.randperm(300, generator=g)[:40]] = float("-inf")
    budget = [1, 16, 128, 300][seed]
    best, pick = ranked(scores, budget)
    order = torch.sort(scores, descending=True, stable=True)
    assert torch.equal(best, order.values[:budget]) and torch.equal(pick, order.indices[:budget])
