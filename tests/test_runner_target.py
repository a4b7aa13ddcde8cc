"""The pure-attention Target: every tree node's logits and features equal a plain forward along its ancestor
path, before and after KV compaction of arbitrary accepted paths."""
from __future__ import annotations

import random

import pytest
import torch

from remote.models.attention_target import AttentionTarget
from remote.models.backends import build_target
from remote.decoding.loop import draft
from remote.decoding.tree_build import build_tree
from tests.runner_fixtures import tiny_drafter, tiny_model  # noqa: F401

TOL = 1e-4


def _plain(model, ids: list[int], layer_ids):
    """Last-position logits and features of one uncached forward over `ids`."""
    out = model(torch.tensor([ids]), output_hidden_states=True)
    feats = torch.cat([out.hidden_states[i + 1][0, -1] for i in layer_ids]) if layer_ids else None
    return out.logits[0, -1].float(), feats


def _ancestor_path(parents, tokens, i):
    path = []
    while i >= 0:
        path.append(tokens[i])
        i = parents[i]
    return path[::-1]


def _random_tree(rng, n):
    return [-1] + [rng.randrange(i) for i in range(1, n)]      # node 0 on the prefix, others anywhere


@torch.inference_mode()
@pytest.mark.parametrize("shape, model_type", [("narrow", "qwen3"), ("wide", "qwen3"), ("wide", "llama")])
def test_tree_nodes_equal_their_ancestor_path(shape, model_type):
    """Random trees, then a random deep accepted path is committed; repeated, so compaction is checked too."""
    model = tiny_model(shape, vocab_size=64, model_type=model_type)
    layer_ids = [0, model.config.num_hidden_layers - 1]
    target = AttentionTarget(model, layer_ids)
    rng = random.Random(0)
    seq = [rng.randrange(64) for _ in range(7)]
    target.prefill(torch.tensor([seq]))
    worst = 0.0
    for _ in range(6):
        parents = _random_tree(rng, 24)
        tokens = [rng.randrange(64) for _ in parents]
        verified = target.verify(torch.tensor(tokens), parents)
        for i in range(len(parents)):
            logits, feats = _plain(model, seq + _ancestor_path(parents, tokens, i), layer_ids)
            worst = max(worst, (verified.logits[i] - logits).abs().max().item(),
                        (verified.features[i] - feats).abs().max().item())
        leaf = max(range(len(parents)), key=lambda i: (len(_ancestor_path(parents, tokens, i)), i))
        path = []
        while leaf >= 0:
            path.append(leaf)
            leaf = parents[leaf]
        path = path[::-1]
        target.commit(path)
        seq += [tokens[i] for i in path]
        assert target.length == len(seq)
    print(f"max node-vs-ancestor-path diff ({shape} {model_type}): {worst:.2e}")
    assert worst <= TOL


@torch.inference_mode()
def test_drafter_tree_nodes_equal_their_ancestor_path():
    """The same with the real DDTree shape: a best-first tree of 64 nodes from the drafter."""
    model = tiny_model("wide", vocab_size=64, initializer_range=0.3)     # peaked drafts: a deep tree
    drafter = tiny_drafter(model, block_size=8)
    target = build_target(model, drafter.target_layer_ids)
    seq = list(range(3, 12))
    verified = target.prefill(torch.tensor([seq]))
    root = int(verified.logits[-1].argmax())
    logits = draft(drafter, model, drafter.new_cache(), verified.features[None], root, target.length)
    tree = build_tree(logits, 64)
    parents, tokens = tree.verify_parents(), [root] + tree.tokens
    verified = target.verify(torch.tensor(tokens), parents)
    diffs = [(verified.logits[i] - _plain(model, seq + _ancestor_path(parents, tokens, i), [])[0]).abs().max()
             for i in range(len(tokens))]
    assert max(diffs).item() <= TOL
    assert max(tree.depths) >= 3                          # a real tree, not a star


@torch.inference_mode()
def test_chain_commit_prefix_and_verify_twice_refused():
    model = tiny_model("narrow", vocab_size=64)
    target = AttentionTarget(model, [0])
    target.prefill(torch.tensor([[1, 2, 3]]))
    target.verify(torch.tensor([4, 5, 6]), [-1, 0, 1])
    with pytest.raises(RuntimeError):
        target.verify(torch.tensor([4]), [-1])
    target.commit([0, 1])
    verified = target.verify(torch.tensor([9]), [-1])
    plain = _plain(model, [1, 2, 3, 4, 5, 9], [0])
    assert (verified.logits[0] - plain[0]).abs().max() <= TOL
