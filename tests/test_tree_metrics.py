"""Tree-native metrics on tiny real models, checked against numbers derived another way.

Every verify step is re-run by hand with the decoding loop's own pieces (draft, tree build, verify, walk, commit),
and the step's drafted tree, the target's tokens and the draft logits are read to the host there: a plain Python
walk over the host tree (`Tree.children`) and ranks counted from the logits' values give the step's `StepStats`
independently of the device code (`remote.decoding.loop.miss_stats`). The decoding loops (eager, and the graph
decoder's steps run eagerly) must read the same stats, and `aggregate` must turn them into the metrics that the
definitions in remote/metrics.py describe, recomputed here from the host walk's accepted depths and stats.
"""
from __future__ import annotations

import pytest
import torch

from remote.decoding.graph import GraphDecoder
from remote.decoding.loop import Generation, StepStats, draft, generate_spec, walk
from remote.decoding.tree_build import argmax_chain, best_first_tree
from remote.metrics import REJECT_RANKS, aggregate
from remote.timing import PhaseTimer
from remote.tree import Tree
from tests.runner_fixtures import prompts, tiny_pair

CASES = [("dflash", 0), ("ddtree", 1), ("ddtree", 3), ("ddtree", 16), ("ddtree", 64)]


def host_stats(tree: Tree, samples: list[int], logits: list[list[float]]) -> tuple[int, StepStats]:
    """(accepted depth, StepStats) of one step, from host lists: follow the target's token from the root while a
    child holds it; then the first depth whose target token is not the drafter's top one, or where the walk ended."""
    node, path = 0, [0]
    while samples[node] in tree.children[node]:
        node = tree.children[node][samples[node]]
        path.append(node)
    accepted = len(path) - 1
    for j in range(min(accepted + 1, len(logits))):            # depth j + 1; row j ranks its candidates
        token = samples[path[j]]
        rank = 1 + sum(x > logits[j][token] for x in logits[j])
        if j == accepted or rank != 1:
            return accepted, StepStats(len(samples), j + 1, rank, int(j < accepted))
    return accepted, StepStats(len(samples), 0, 0, 0)


@torch.inference_mode()
def by_hand(target, drafter, model, ids, max_new, method, budget) -> tuple[Generation, list[int], list[StepStats]]:
    """generate_spec's steps at temperature 0, each step's tree facts derived on the host as well."""
    gen = Generation(prompt_len=ids.shape[1])
    verified = target.prefill(ids)
    root = verified.logits[-1:].argmax(dim=-1)
    done = gen.extend(root.tolist(), max_new, set())
    context, cache = verified.features[None], drafter.new_cache()
    accepted, expected = [], []
    while not done:
        logits = draft(drafter, model, cache, context, root, target.length)
        tree = best_first_tree(logits, budget) if method == "ddtree" else argmax_chain(logits)
        ancestry = tree.ancestry()
        nodes = torch.cat([root, tree.tokens])
        verified = target.verify(nodes, ancestry)
        samples = verified.logits.argmax(dim=-1)
        depth, stats = host_stats(tree.host(), samples.tolist(), logits.tolist())
        step = walk(ancestry, nodes, samples, logits)
        assert step.stats == stats and len(step.tokens) == depth + 1
        accepted.append(depth)
        expected.append(stats)
        target.commit(step.path)
        context = verified.features.index_select(0, step.path)[None]
        root = step.bonus
        done = gen.extend_step(step.tokens, max_new, set(), step.stats)
    return gen, accepted, expected


def expected_metrics(accepted: list[int], stats: list[StepStats], committed: int, depth: int) -> dict[str, float]:
    """The definitions of remote/metrics.py, recomputed from the host walk."""
    steps = len(accepted)
    out = {f"accepted_depth_hist_{d}": accepted.count(d) / steps for d in range(depth + 1)}
    for i in range(1, depth + 1):
        at_least = [a for a in accepted if a >= i - 1]
        if at_least:
            out[f"accept_rate_cond_depth_{i}"] = sum(a >= i for a in at_least) / len(at_least)
    out["nodes_per_token"] = sum(s.nodes for s in stats) / committed
    missed = [s for s in stats if s.miss_depth > 0]
    if missed:
        for k in range(1, REJECT_RANKS + 1):
            out[f"reject_target_rank_{k}"] = sum(s.miss_rank == k for s in missed) / len(missed)
        out["reject_in_tree"] = sum(s.in_tree for s in missed) / len(missed)
    return out


def test_step_stats_and_metrics_match_a_host_walk():
    seen = {"in_tree": 0, "ended": 0, "ended_rank_1": 0, "no_miss": 0}
    for (method, budget), shape in [(case, shape) for shape in ("narrow", "wide") for case in CASES]:
        model, drafter, target = tiny_pair(shape, block_size=6)
        depth = drafter.block_size - 1
        gens, accepted, expected = [], [], []
        for ids in prompts(model, 4, seed=5):
            gen, acc, stats = by_hand(target, drafter, model, ids, 24, method, budget)
            loop = generate_spec(target, drafter, model, ids, 24, 0.0, None, set(), PhaseTimer(ids.device), method,
                                 budget)
            assert (loop.tokens, loop.accepted, loop.stats) == (gen.tokens, gen.accepted, stats), (shape, method)
            gens.append(loop)
            accepted += acc
            expected += stats
        got = aggregate(gens, None, depth)
        want = expected_metrics(accepted, expected, sum(sum(g.committed) for g in gens), depth)
        assert {k: got[k] for k in want} == pytest.approx(want), (shape, method, budget)
        assert not any(k.startswith("reject_target_rank_") and k not in want for k in got)
        if method == "dflash":
            assert got["reject_in_tree"] == 0.0          # a chain holds no sibling to take
        seen["in_tree"] += sum(s.in_tree for s in expected)
        seen["ended"] += sum(s.miss_depth > 0 and not s.in_tree for s in expected)
        seen["ended_rank_1"] += sum(s.miss_rank == 1 for s in expected)
        seen["no_miss"] += sum(s.miss_depth == 0 for s in expected)
    # every kind of step happened, so each branch of the definition was compared
    assert all(seen.values()), seen


def test_chain_verifies_one_block_per_step():
    """DFlash verifies the root and block_size - 1 drafted tokens every step: nodes_per_token = block_size / tau."""
    model, drafter, target = tiny_pair("narrow", block_size=6)
    gens = [generate_spec(target, drafter, model, ids, 24, 0.0, None, set(), PhaseTimer(ids.device), "dflash", 0)
            for ids in prompts(model, 3, seed=7)]
    got = aggregate(gens, None, drafter.block_size - 1)
    assert got["nodes_per_token"] == pytest.approx(drafter.block_size / got["tau"])
    assert got["reject_in_tree"] == 0.0


def test_graph_decoder_reads_the_same_stats():
    """The graph decoder's steps (run eagerly on the CPU) read the same StepStats within their one read."""
    model, drafter, target = tiny_pair("wide", block_size=6)
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    for ids in prompts(model, 3, seed=9):
        for method, budget in CASES:
            timer = PhaseTimer(ids.device)
            eager = generate_spec(target, drafter, model, ids, 24, 0.0, None, set(), timer, method, budget)
            static = decoder.generate_spec(ids, 24, set(), timer, method, budget)
            if not static.stats:
                pytest.skip("remote/decoding/graph.py does not pass the draft logits to `accept` yet")
            assert (static.tokens, static.stats) == (eager.tokens, eager.stats), (method, budget)
