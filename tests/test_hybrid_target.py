"""`HybridTarget` against the oracle (the model's own forward over the ancestor path, cache from the config), on tiny
random hybrid models in float32 on CPU.

- every node of random trees (several depths, branchings, forests, prefixes shorter than the conv kernel) gets the
  logits and features of a plain forward over prefix + its ancestor path;
- after each commit (random accepted paths, chains with partial acceptance) the recurrent, conv and attention
  state equals a plain forward's over the accepted sequence, and the next verify is right again;
- prefill equals the model's forward for every position and every layer's features;
- the supported transformers range, the kernel path, and bad input are reported as documented.
"""
from __future__ import annotations

import random

import pytest
import torch

from remote.errors import SpecError
from remote.models.hybrid_target import TRANSFORMERS_BELOW, TRANSFORMERS_MIN, HybridTarget, check_transformers_version
from tests.test_hybrid_models import (  # noqa: F401
    ancestor_path, cache_state, layer_types, plain_forward, plain_last_batch, random_tree,
    real_token_ids, tiny_model,
)

TOL = 1e-4
ALL_MODELS = ["qwen3_5-3to1", "qwen3_5-1to1", "qwen3_5-vl", "qwen3_next", "qwen3_5_moe"]
COMMIT_MODELS = ["qwen3_5-3to1", "qwen3_5-1to1", "qwen3_next"]


@pytest.mark.parametrize("name", ALL_MODELS)
def test_prefill_matches_model_forward(name):
    model = tiny_model(name)
    n_layers = len(layer_types(model))
    ids = real_token_ids()[2][:20]
    target = HybridTarget(model, list(range(n_layers)))
    got = target.prefill(torch.tensor([ids]))
    out, _ = plain_forward(model, ids)
    vocab = model.config.get_text_config().vocab_size
    assert got.logits.dtype == torch.float32 and got.logits.shape == (1, vocab)     # the last position only
    assert (got.logits - out.logits[0, -1:]).abs().max() <= TOL
    want = torch.cat([out.hidden_states[i + 1][0] for i in range(n_layers)], dim=-1)
    assert (got.features - want).abs().max() <= TOL
    assert target.length == len(ids)


# (prefix length, nodes, reach, roots): deep thin trees, bushy ones, a forest, a chain, a prefix shorter than the
# conv kernel (the windows then reach into the zero-padded committed conv state).
TREES = [(12, 40, 3, 1), (9, 60, 60, 1), (2, 24, 2, 1), (7, 30, 6, 3), (5, 16, 1, 1)]


@pytest.mark.parametrize("name", ALL_MODELS)
def test_every_tree_node_matches_its_ancestor_path(name):
    model = tiny_model(name)
    layer_ids = [0, len(layer_types(model)) // 2]
    target = HybridTarget(model, layer_ids)
    rng = random.Random(name)
    corpus = [t for ids in real_token_ids() for t in ids]
    worst = 0.0
    for prefix_len, n, reach, roots in TREES:
        start = rng.randrange(len(corpus) - prefix_len - n)
        prompt = corpus[start:start + prefix_len]
        parents = random_tree(rng, n, reach, roots) if reach > 1 else [i - 1 for i in range(n)]
        tokens = [rng.choice(corpus) for _ in range(n)]
        target.prefill(torch.tensor([prompt]))
        got = target.verify(torch.tensor(tokens), parents)
        assert got.logits.shape[0] == n and got.features.shape[0] == n
        paths = [prompt + [tokens[j] for j in ancestor_path(parents, i)] for i in range(n)]
        logits, hidden = plain_last_batch(model, paths)
        features = torch.cat([hidden[i + 1] for i in layer_ids], dim=-1)
        worst = max(worst, (got.logits - logits).abs().max().item(), (got.features - features).abs().max().item())
    assert worst <= TOL, f"{name}: max abs diff {worst:.2e}"


def _assert_state_matches(target: HybridTarget, model, sequence: list[int]) -> float:
    _, cache = plain_forward(model, sequence)
    worst = 0.0
    for layer, kind in enumerate(layer_types(model)):
        ours, ref = target.layer_state(layer), cache_state(cache, layer, kind)
        for key in ref:
            assert ours[key].shape == ref[key].shape, (layer, key, ours[key].shape, ref[key].shape)
            worst = max(worst, (ours[key].float() - ref[key].float()).abs().max().item())
    assert worst <= TOL, f"state after {len(sequence)} tokens differs by {worst:.2e}"
    return worst


@pytest.mark.parametrize("name", COMMIT_MODELS)
def test_commit_installs_the_state_of_a_plain_forward(name):
    """Rounds of verify -> commit (trees with random accepted paths, DFlash chains with partial acceptance, a
    full-chain acceptance, a lone root): state after each commit equals the plain forward's over the accepted
    sequence, and each verify's logits (which start from the committed state) equal the plain forward's. (Also run
    by the kernel tests, tests/test_gdn_*_kernel.py, with the name of their model.)"""
    _commit_rounds(name, reserved=False)


@pytest.mark.parametrize("name", COMMIT_MODELS)
def test_reserved_commits_install_the_state_of_a_plain_forward(name):
    """The same on reserved state, where every attention layer's K/V is a view of one store that a commit
    compacts at once."""
    _commit_rounds(name, reserved=True)


def _commit_rounds(name: str, reserved: bool) -> None:
    model = tiny_model(name)
    target = HybridTarget(model, [1])
    if reserved:
        target.reserve(256)
        assert len(target._stores) == 1 and all(kv.keys._base is target._stores[0] for kv in target._kv.values())
    rng = random.Random(7)
    corpus = [t for ids in real_token_ids() for t in ids]
    sequence = corpus[:10]
    target.prefill(torch.tensor([sequence]))
    _assert_state_matches(target, model, sequence)
    rounds = ["tree", "chain", "tree", "chain-all", "root", "tree", "chain", "tree"]
    for kind in rounds:
        if kind == "tree":
            parents = random_tree(rng, 24, reach=rng.choice([2, 5, 24]))
            path = ancestor_path(parents, rng.randrange(len(parents)))
        else:  # a DFlash block: root + drafts, accept a prefix of it
            parents = [i - 1 for i in range(8 if kind != "root" else 1)]
            keep = {"chain": rng.randint(1, 7), "chain-all": 8, "root": 1}[kind]
            path = list(range(keep))
        tokens = [rng.choice(corpus) for _ in parents]
        got = target.verify(torch.tensor(tokens), parents)
        logits, _ = plain_last_batch(model, [sequence + [tokens[j] for j in ancestor_path(parents, i)]
                                             for i in range(len(parents))])
        assert (got.logits - logits).abs().max() <= TOL, kind
        target.commit(path)
        sequence = sequence + [tokens[j] for j in path]
        assert target.length == len(sequence)
        _assert_state_matches(target, model, sequence)


def test_a_full_reserved_store_refuses_to_grow():
    """Growing a reserved layer's K/V would leave its store (which commits compact, and captured steps read)
    behind: refused."""
    target = HybridTarget(tiny_model("qwen3_5-3to1"), [0])
    target.reserve(8)
    with pytest.raises(RuntimeError, match="reserved K/V of 8 rows cannot take rows up to 10"):
        target.prefill(torch.tensor([real_token_ids()[0][:10]]))


def test_commit_refuses_a_path_that_is_not_a_root_to_node_chain():
    target = HybridTarget(tiny_model("qwen3_5-3to1"), [0])
    target.prefill(torch.tensor([real_token_ids()[0][:6]]))
    target.verify(torch.tensor([5, 6, 7]), [-1, 0, 0])
    with pytest.raises(ValueError, match="root-to-node chain"):
        target.commit([0, 2, 1])
    with pytest.raises(ValueError, match="root-to-node chain"):
        target.commit([1])
    target.commit([0, 2])
    assert target.length == 8
    with pytest.raises(RuntimeError, match="commit without a verify"):
        target.commit([0])


def test_verify_refuses_bad_trees():
    target = HybridTarget(tiny_model("qwen3_5-3to1"), [0])
    with pytest.raises(RuntimeError, match="before prefill"):
        target.verify(torch.tensor([1]), [-1])
    target.prefill(torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match="parent must precede"):
        target.verify(torch.tensor([1, 2]), [-1, 1])
    with pytest.raises(ValueError, match="nodes but parents"):
        target.verify(torch.tensor([1, 2]), [-1])


def test_transformers_range_is_checked_with_a_one_line_message():
    check_transformers_version()  # the installed one is inside the range
    for outside in ("5.16.0", "5.4.0", TRANSFORMERS_BELOW, "6.0.0"):
        with pytest.raises(SpecError) as info:
            check_transformers_version(outside)
        message = str(info.value)
        assert "\n" not in message and outside in message
        assert f">={TRANSFORMERS_MIN},<{TRANSFORMERS_BELOW}" in message


def test_kernel_path_is_reported_and_torch_on_cpu():
    model = tiny_model("qwen3_5-3to1")
    assert HybridTarget(model, [0]).kernel_path == "torch"
    assert HybridTarget(model, [0], kernels="torch").kernel_path == "torch"
    with pytest.raises(ValueError, match="auto, torch"):
        HybridTarget(model, [0], kernels="triton")


def test_unsupported_models_and_layers_are_refused_with_the_choices():
    from transformers import AutoConfig, AutoModelForCausalLM

    qwen3 = AutoModelForCausalLM.from_config(AutoConfig.for_model(
        "qwen3", vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16))
    with pytest.raises(SpecError, match="qwen3_5_text.*got 'qwen3'"):
        HybridTarget(qwen3, [0])
    with pytest.raises(SpecError, match=r"target_layer_ids \[4\] out of range"):
        HybridTarget(tiny_model("qwen3_5-3to1"), [0, 4])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fast GDN kernels run on CUDA only")
def test_fast_kernels_compute_the_torch_math_on_cuda():
    """The bundle `auto` picks (fla / causal_conv1d where installed) against the torch bundle, float32, same inputs:
    the recurrent step exactly (1e-5), the chunk kernel to within fla's TF32 rounding (2% of the output scale)."""
    from remote.kernels import gdn_tree
    from remote.kernels.gdn_paths import select_gdn_kernels

    gdn = tiny_model("qwen3_5-3to1").model.layers[0].linear_attn
    fast, ref = select_gdn_kernels(gdn, torch.device("cuda"), "auto"), select_gdn_kernels(gdn, "cuda", "torch")
    gen = torch.Generator(device="cuda").manual_seed(0)

    def inputs(batch, steps, heads=4, dim=16):
        q, k, v = (torch.randn(batch, steps, heads, dim, device="cuda", generator=gen) for _ in range(3))
        g = -0.5 * torch.rand(batch, steps, heads, device="cuda", generator=gen)
        beta = torch.rand(batch, steps, heads, device="cuda", generator=gen)
        return q, k, v, g, beta, torch.randn(batch, heads, dim, dim, device="cuda", generator=gen)

    args = inputs(5, 1)
    (o1, s1), (o2, s2) = fast.step(*args), ref.step(*args)
    assert (o1 - o2).abs().max() <= 1e-5 and (s1 - s2).abs().max() <= 1e-5, fast.path
    *one, state = inputs(1, 1)              # our one-token step (AR's where fla is absent), the state in place
    o2, s2 = ref.step(*one, state)
    o1 = gdn_tree.token_step(*one, state)
    assert (o1 - o2).abs().max() <= 1e-5 and (state - s2).abs().max() <= 1e-5
    args = inputs(1, 100)
    (o1, s1), (o2, s2) = fast.chunk(*args), ref.chunk(*args)
    assert (o1 - o2).abs().max() <= 2e-2 * o2.abs().max(), fast.path
    assert (s1 - s2).abs().max() <= 2e-2 * s2.abs().max(), fast.path


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fast GDN kernels run on CUDA only")
@pytest.mark.parametrize("name", ["qwen3_5-3to1", "qwen3_5-1to1"])
def test_fast_kernel_path_matches_torch_path_on_cuda(name):
    """A whole prefill / tree verify / commit on CUDA with `auto` vs `torch`, float32, dense models (MoE routing
    would turn rounding into jumps): logits within fla's TF32 rounding (3% of the logit scale; a layout or state
    bug is O(100%)). Without fla installed both runs are the torch path and must agree exactly."""
    model = tiny_model(name).cuda()
    try:
        rng = random.Random(3)
        prompt = torch.tensor([real_token_ids()[3][:40]], device="cuda")
        parents = random_tree(rng, 48, reach=4)
        tokens = torch.tensor([rng.randrange(1000) for _ in parents], device="cuda")
        path = ancestor_path(parents, 47)
        runs = {}
        for kind in ("auto", "torch"):
            target = HybridTarget(model, [1], kernels=kind)
            pre = target.prefill(prompt).logits
            tree = target.verify(tokens, parents).logits
            target.commit(path)
            after = target.verify(tokens[:8], [i - 1 for i in range(8)]).logits   # starts from the installed state
            runs[kind] = (target.kernel_path, pre, tree, after)
        scale = runs["torch"][1].abs().max().item()
        tol = 0.0 if runs["auto"][0] == "torch" else 3e-2 * scale
        for what, a, b in zip(("prefill", "tree", "after commit"), runs["auto"][1:], runs["torch"][1:]):
            diff = (a - b).abs().max().item()
            assert diff <= tol, f"{runs['auto'][0]} vs torch, {what}: {diff:.2e} (logit scale {scale:.2f})"
    finally:
        model.cpu()


def _conv_window_reference(parents: list[int], node: int, k: int) -> list[int]:
    """Bank columns of node's conv window, oldest first, walking up the parents (the former host formula)."""
    window, cur, back = [k + node], node, 0
    for _ in range(k - 1):
        cur = parents[cur] if cur >= 0 else -1
        if cur >= 0:
            window.append(k + cur)
        else:
            back += 1
            window.append(k - back)
    return window[::-1]


@pytest.mark.parametrize("seed", range(6))
def test_tree_layout_on_the_device_equals_the_host_walk(seed):
    """Conv windows and per-node paths of the device-built layout, on trees and forests, against a host walk up the
    parents, for conv kernels shorter and longer than the tree is deep."""
    from remote.models.gdn import TreeLayout
    from remote.tree import Ancestry

    rng = random.Random(seed)
    parents = random_tree(rng, 30, reach=rng.choice([1, 3, 30]), roots=rng.choice([1, 1, 3]))
    for k in (2, 4, 6):
        layout = TreeLayout.build(Ancestry.from_parents(parents), k)
        assert layout.conv_index.tolist() == [_conv_window_reference(parents, i, k) for i in range(len(parents))]
        depth, ancestors = layout.depth.tolist(), layout.ancestors.tolist()
        for i in range(len(parents)):            # the sequence node i runs: its path, then itself as padding
            path = ancestor_path(parents, i)
            assert ancestors[i][:depth[i] + 1] == path and set(ancestors[i][depth[i]:]) == {i}


@pytest.mark.parametrize("name", ["qwen3_5-3to1", "qwen3_next"])
def test_step_kernels_fuse_the_zero_centred_and_gated_norms(name):
    """Inside `step_kernels` (the graphed steps) each `1 + weight` RMSNorm and each gated norm of a hybrid is one
    `rms_norm` op and the logits stay the model's own; on exit transformers' norms are back."""
    from remote.kernels.step import GATED, ZERO_CENTRED, step_kernels

    model = tiny_model(name)
    ids = real_token_ids()[0][:12]

    def forward():
        with torch.profiler.profile() as prof:
            out, _ = plain_forward(model, ids)
        return out.logits, {e.key: e.count for e in prof.key_averages()}.get("aten::rms_norm", 0)

    plain, plain_ops = forward()
    with step_kernels(model) as count:
        fused, fused_ops = forward()
    again, again_ops = forward()
    norms = sum(type(m).__name__ in ZERO_CENTRED + GATED for m in model.modules())
    assert count == norms == fused_ops > 0 and plain_ops == again_ops == 0
    assert (fused - plain).abs().max() < 1e-5 and torch.equal(again, plain)
