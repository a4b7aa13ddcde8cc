"""The graph decoder's step functions (remote.graph_decode), run eagerly on the CPU in float32: token for token the
same as the eager loop (remote.decode), per-step acceptance included, on two tiny Qwen3 shapes and against a stop
id; on CUDA, the captured graphs replay the same tokens as the eager steps."""
from __future__ import annotations

import pytest
import torch

from remote.decode import generate_ar, generate_spec
from remote.step_kernels import step_kernels
from remote.graph_decode import GraphDecoder, HybridGraphDecoder, graph_support
from remote.timing import PhaseTimer
from tests.runner_fixtures import prompts, tiny_drafter, tiny_model, tiny_pair

METHODS = [("dflash", 0), ("ddtree", 1), ("ddtree", 8), ("ddtree", 64)]


def _both(decoder, target, drafter, model, ids, max_new, stop, method, budget):
    timer = PhaseTimer(ids.device)
    if method == "ar":
        return generate_ar(model, ids, max_new, 0.0, None, stop, timer), decoder.generate_ar(ids, max_new, stop, timer)
    return (generate_spec(target, drafter, model, ids, max_new, 0.0, None, stop, timer, method, budget),
            decoder.generate_spec(ids, max_new, stop, timer, method, budget))


@pytest.mark.parametrize("shape", ["narrow", "wide"])
def test_static_steps_equal_the_eager_loop(shape):
    model, drafter, target = tiny_pair(shape, block_size=8)
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    deepest = 0
    for ids in prompts(model, 6, seed=2):
        for method, budget in [("ar", 0)] + METHODS:
            eager, static = _both(decoder, target, drafter, model, ids, 40, set(), method, budget)
            assert static.tokens == eager.tokens, (method, budget)
            assert static.accepted == eager.accepted, (method, budget)
            deepest = max([deepest] + static.accepted)
    assert deepest >= 2          # multi-token acceptance, so compaction and padded drafter context were exercised


def test_stop_id_and_cache_growth():
    model, drafter, target = tiny_pair("narrow", block_size=8)
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    ids = prompts(model, 1, seed=3)[0]
    ar = generate_ar(model, ids, 30, 0.0, None, set(), PhaseTimer(ids.device)).tokens
    stop = {ar[12]}
    for method, budget in [("ar", 0), ("ddtree", 16)]:
        decoder.generate_ar(ids, 4, set(), PhaseTimer(ids.device))      # small first: the caches grow later
        eager, static = _both(decoder, target, drafter, model, ids, 30, stop, method, budget)
        assert static.tokens == eager.tokens and static.tokens[-1] in stop


def test_support_names_what_keeps_a_run_eager():
    model = tiny_model("narrow")
    drafter = tiny_drafter(model)
    assert graph_support(model, drafter, torch.device("cpu"), 0.0) == "not on CUDA"
    assert graph_support(model, drafter, torch.device("cuda"), 1.0).startswith("temperature")
    assert graph_support(model, drafter, torch.device("cuda"), 0.0) is None
    drafter.layers[0].self_attn.is_causal = True
    assert "drafter" in graph_support(model, drafter, torch.device("cuda"), 0.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("method,budget", [("ar", 0), ("dflash", 0), ("ddtree", 32)])
def test_cuda_graph_replays_equal_eager_steps(method, budget):
    model, drafter, _ = tiny_pair("wide", block_size=8)
    model, drafter = model.cuda(), drafter.cuda()
    eager = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    graphed = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=True)
    for ids in prompts(model, 4, seed=4):
        ids = ids.cuda()
        timer = PhaseTimer(ids.device)
        run = (lambda d: d.generate_ar(ids, 48, set(), timer)) if method == "ar" else \
            (lambda d: d.generate_spec(ids, 48, set(), timer, method, budget))
        assert run(graphed).tokens == run(eager).tokens
    assert graphed._graphs, "nothing was captured"


def test_a_step_that_cannot_be_captured_turns_graphs_off(monkeypatch):
    """The capture fails (as a forward that reads a device value would): the warm-up step's result stands, every
    later step runs eagerly, the tokens are the eager loop's, and `fallback` says why."""
    model, drafter, target = tiny_pair("wide", block_size=8)
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=True)
    monkeypatch.setattr(decoder, "_warm_up", lambda step: step())           # no CUDA stream on this machine

    def refuse(step):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")
    monkeypatch.setattr(decoder, "_capture", refuse)
    ids = prompts(model, 1, seed=2)[0]                   # a prompt whose continuation does not repeat one token
    eager, static = _both(decoder, target, drafter, model, ids, 30, set(), "ddtree", 16)
    assert not decoder.graphs and decoder.fallback == "RuntimeError: operation not permitted when stream is capturing"
    assert static.tokens == eager.tokens and len(set(eager.tokens)) > 3


@pytest.mark.parametrize("shape", ["3to1", "1to1"])
def test_hybrid_ar_steps_equal_the_model_own_decoding(shape):
    """HybridGraphDecoder's step (HybridTarget's layer loop on reserved state, updated in place) gives the tokens of
    the model's own cached forward, also when prompts of several lengths reuse the same reserved state."""
    from tests.test_hybrid_lossless import tiny_hybrid_pair

    model, _, _ = tiny_hybrid_pair(shape)
    decoder = HybridGraphDecoder(model, None, None, graphs=False)
    decoder.reserve(12, 40, "ar", 0)
    g = torch.Generator().manual_seed(3)
    storage = None
    for length in (2, 9, 5):                      # shorter and longer than the conv kernel
        ids = torch.randint(0, model.config.vocab_size - 1, (1, length), generator=g)
        timer = PhaseTimer(ids.device)
        eager = generate_ar(model, ids, 40, 0.0, None, set(), timer).tokens
        assert decoder.generate_ar(ids, 40, set(), timer).tokens == eager
        assert len(set(eager)) > 2
        state = decoder.target
        now = [t.data_ptr() for t in (*state._conv.values(), *state._rec.values(),
                                      *(kv.keys for kv in state._kv.values()))]
        assert storage in (None, now), "a captured step would read state from storage a new prompt replaced"
        storage = now


@pytest.mark.parametrize("shape", ["3to1", "1to1"])
def test_hybrid_dflash_steps_equal_the_eager_loop(shape):
    """HybridGraphDecoder's DFlash step (chain verify on reserved state, commit recomputing the GDN states over the
    accepted path padded to the block with no-op steps) emits the eager loop's tokens and acceptances."""
    from tests.test_hybrid_lossless import tiny_hybrid_pair

    model, drafter, target = tiny_hybrid_pair(shape)
    decoder = HybridGraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    g = torch.Generator().manual_seed(4)
    deepest = 0
    for length in (2, 9, 5):
        ids = torch.randint(0, model.config.vocab_size - 1, (1, length), generator=g)
        timer = PhaseTimer(ids.device)
        eager = generate_spec(target, drafter, model, ids, 40, 0.0, None, set(), timer, "dflash", 0)
        static = decoder.generate_spec(ids, 40, set(), timer, "dflash", 0)
        assert (static.tokens, static.accepted) == (eager.tokens, eager.accepted)
        deepest = max([deepest] + static.accepted)
    # every step's path is padded to the block (8) with no-op steps; some accepted drafted tokens too
    assert deepest >= 1 and decoder.supports("dflash") and not decoder.supports("ddtree")


@pytest.mark.parametrize("shape", ["3to1", "1to1"])
def test_hybrid_chain_commit_on_reserved_state_equals_the_eager_commit(shape):
    """verify_chain + commit_chain (device start, path padded to the chain length) leave the logits and every
    layer's state of HybridTarget's eager verify + commit, for every accepted length."""
    from remote.gdn_tree import TreeLayout
    from remote.hybrid_target import HybridTarget, Static
    from remote.tree import Ancestry
    from tests.test_hybrid_lossless import tiny_hybrid_pair

    model = tiny_hybrid_pair(shape)[0]
    g = torch.Generator().manual_seed(5)
    prompt, chain = torch.randint(0, 10, (1, 5), generator=g), torch.randint(0, 10, (6,), generator=g)
    for keep in (1, 2, 4, 6):
        eager, static = HybridTarget(model, [0]), HybridTarget(model, [0])
        eager.prefill(prompt)
        expected = eager.verify(chain, list(range(-1, 5)))
        eager.commit(list(range(keep)))
        static.reserve(16)
        static.prefill(prompt)
        start, rows = torch.tensor(5), 5 + torch.arange(6)
        step = Static(start, torch.arange(16)[None] <= rows[:, None],
                      TreeLayout.build(Ancestry.chain_of(6, "cpu"), static.conv_kernel))
        got = static.verify_chain(chain, step)
        static.commit_chain(step, torch.tensor(list(range(keep)) + [keep - 1] * (6 - keep)), torch.tensor(keep))
        assert torch.allclose(got.logits, expected.logits, atol=1e-5)
        assert torch.allclose(got.features, expected.features, atol=1e-5)
        static._len = eager.length                     # commit_chain leaves the host length to its caller
        for layer in range(len(static.layer_types)):
            for name, value in eager.layer_state(layer).items():
                assert torch.allclose(static.layer_state(layer)[name], value, atol=1e-5), (keep, layer, name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_hybrid_graph_replays_equal_eager_steps():
    from tests.test_hybrid_lossless import tiny_hybrid_pair

    model, drafter, _ = tiny_hybrid_pair("3to1")
    model, drafter = model.cuda(), drafter.cuda()
    layers = drafter.target_layer_ids
    eager, graphed = HybridGraphDecoder(model, drafter, layers, graphs=False), HybridGraphDecoder(model, drafter, layers)
    for ids in prompts(model, 3, seed=5):
        ids = ids.cuda() % (model.config.vocab_size - 1)
        timer = PhaseTimer(ids.device)
        assert graphed.generate_ar(ids, 40, set(), timer).tokens == eager.generate_ar(ids, 40, set(), timer).tokens
        assert graphed.generate_spec(ids, 40, set(), timer, "dflash", 0).tokens == \
            eager.generate_spec(ids, 40, set(), timer, "dflash", 0).tokens
    assert len(graphed._graphs) == 2 and graphed.graphs, graphed.fallback


def test_step_kernels_compute_the_model_norms_and_attention_and_are_undone():
    """Inside `step_kernels` the norms are one `rms_norm` op each and masked attention with grouped K/V heads runs
    without repeating K/V (the mask is stacked per group instead); the logits are the model's own."""
    model, drafter, _ = tiny_pair("narrow", block_size=8)          # 2 query heads share 1 K/V head
    ids = prompts(model, 1, length=7, seed=6)[0]
    causal = torch.full((7, 7), float("-inf")).triu(1)[None, None]  # a 4-D mask, as the graphed steps pass

    def forward():
        with torch.profiler.profile() as prof:
            logits = model(ids, attention_mask=causal).logits
        ops = {e.key: e.count for e in prof.key_averages()}
        return logits, ops.get("aten::rms_norm", 0), ops.get("aten::repeat", 0)

    with torch.inference_mode():
        plain, plain_norms, plain_repeats = forward()
        with step_kernels(model, drafter) as count:
            fused, fused_norms, fused_repeats = forward()
        again, *again_ops = forward()
    layers = len(model.model.layers)
    assert count == 4 * (layers + len(drafter.layers)) + 1 + 2     # input, post-attention, q, k; final; drafter's
    assert fused_norms == 4 * layers + 1 and fused_repeats == layers
    assert plain_norms == plain_repeats == 0 and again_ops == [0, 0]
    assert (fused - plain).abs().max() < 1e-5 and torch.equal(again, plain)


def test_compiled_steps_decode_the_eager_tokens():
    """compile_steps: the torch.compile'd steps (inductor, C++ on a CPU) emit the plain steps' tokens."""
    model, drafter, _ = tiny_pair("narrow", block_size=8)
    from torch._dynamo.utils import counters

    plain = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    compiled = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False, compiled=True)
    ids = prompts(model, 1, seed=2)[0]
    timer = PhaseTimer(ids.device)
    graphs_before = counters["stats"]["unique_graphs"]
    assert compiled.generate_ar(ids, 24, set(), timer).tokens == plain.generate_ar(ids, 24, set(), timer).tokens
    spec = [d.generate_spec(ids, 24, set(), timer, "ddtree", 8) for d in (compiled, plain)]
    assert spec[0].tokens == spec[1].tokens and spec[0].accepted == spec[1].accepted
    assert counters["stats"]["unique_graphs"] >= graphs_before + 2      # the AR step and the DDTree step compiled
