"""The graph decoder's step functions (remote.decoding.graph), run eagerly on the CPU in float32: token for token the
same as the eager loop (remote.decoding.loop), per-step acceptance included, on two tiny Qwen3 shapes and against a stop
id; on CUDA, the captured graphs replay the same tokens as the eager steps."""
from __future__ import annotations

import pytest
import torch

from remote.decoding.loop import generate_ar, generate_spec
from remote.kernels.step import step_kernels
from remote.decoding.graph import GraphDecoder, GraphedSpec, HybridGraphDecoder, graph_support
from remote.timing import PhaseTimer
from tests.runner_fixtures import prompts, tiny_drafter, tiny_model, tiny_pair

METHODS = [("dflash", 0), ("ddtree", 1), ("ddtree", 8), ("ddtree", 64)]


def _both(decoder, target, drafter, model, ids, max_new, stop, method, budget, temperature=0.0, seed=0):
    """The eager loop's generation and the decoder's, sampled at `temperature` from `seed` alike."""
    timer = PhaseTimer(ids.device)
    rng = torch.Generator(device=ids.device).manual_seed(seed)
    if method == "ar":
        return (generate_ar(model, ids, max_new, temperature, rng, stop, timer),
                decoder.generate_ar(ids, max_new, stop, timer, temperature, seed))
    return (generate_spec(target, drafter, model, ids, max_new, temperature, rng, stop, timer, method, budget),
            decoder.generate_spec(ids, max_new, stop, timer, method, budget, temperature=temperature, seed=seed))


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


@pytest.mark.parametrize("shape", ["narrow", "wide"])
def test_sampled_static_steps_equal_the_eager_loop(shape):
    """At temperature 1 the decoder's steps draw the eager loop's numbers in its order: the same samples, token for
    token, so its distribution is the loop's (tests/test_runner_sampling.py: the loop's is AR's)."""
    model, drafter, target = tiny_pair(shape, block_size=8)
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    differ = 0
    for seed, ids in enumerate(prompts(model, 4, seed=7)):
        greedy = _both(decoder, target, drafter, model, ids, 24, set(), "ar", 0)[0].tokens
        for method, budget in [("ar", 0)] + METHODS:
            eager, static = _both(decoder, target, drafter, model, ids, 24, set(), method, budget, 1.0, seed)
            assert static.tokens == eager.tokens and static.accepted == eager.accepted, (method, budget)
            differ += static.tokens != greedy
    assert differ                 # sampling happened: some generations left the greedy path


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


def test_exactly_sized_caches_hold_every_step():
    """Caches sized exactly for a generation (as bench/bench_methods.py sizes them) hold every row its steps write,
    queued steps included, at every length; the drafter's context cache is the same size for every method."""
    model, drafter, target = tiny_pair("narrow", block_size=8)
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    ids = prompts(model, 1, seed=3)[0]
    for max_new in (1, 2, 3, 7, 9, 17, 30):
        contexts = set()
        for method, budget in [("ar", 0), ("dflash", 0), ("ddtree", 16), ("ddtree", 3)]:
            decoder.reserve(ids.shape[1], max_new, method, budget, exact=True)
            contexts.add(decoder.context_capacity)
            eager, static = _both(decoder, target, drafter, model, ids, max_new, set(), method, budget)
            assert static.tokens == eager.tokens, (max_new, method, budget)
        assert len(contexts) == 1, contexts


def test_queued_steps_run_to_the_end_of_the_generation(monkeypatch):
    """The next speculative step is queued before the host reads the current one, up to the generation's last step
    (each step commits a token at least: one more is launched unless those queued surely reach max_new_tokens), so
    every step but the last is read with another behind it; at a stop token or at max_new_tokens at most one step
    runs unread, and the next generation starts clean."""
    model, drafter, target = tiny_pair("narrow", block_size=8)
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    ids = prompts(model, 1, seed=3)[0]
    steps, behind = [], []
    plain = decoder._spec_step
    decoder._spec_step = lambda *args, **kwargs: steps.append(1) or plain(*args, **kwargs)
    read = GraphedSpec.read
    monkeypatch.setattr(GraphedSpec, "read", lambda self, held: behind.append(self.unread - 1) or read(self, held))
    full = _both(decoder, target, drafter, model, ids, 30, set(), "ddtree", 16)
    assert full[1].tokens == full[0].tokens and len(steps) - len(full[1].accepted) in (0, 1)
    assert len(behind) == len(full[1].accepted) > 8 and behind[:-1] == [1] * (len(behind) - 1), behind
    steps.clear()
    stopped = _both(decoder, target, drafter, model, ids, 30, {full[0].tokens[9]}, "ddtree", 16)[1]
    assert stopped.tokens == full[0].tokens[:full[0].tokens.index(full[0].tokens[9]) + 1]
    assert len(steps) == len(stopped.accepted) + 1
    assert _both(decoder, target, drafter, model, ids, 30, set(), "ddtree", 16)[1].tokens == full[0].tokens


class _Clock(PhaseTimer):
    """A CPU timer whose clock counts its marks: a phase lasts as many marks as were taken inside it."""

    def __init__(self):
        super().__init__(torch.device("cpu"))
        self.now = 0

    def mark(self):
        self.now += 1
        return self.now


@pytest.mark.parametrize("method", ["ar", "ddtree", "eager-ar"])
def test_decode_time_ends_with_the_last_token_step(method):
    """The step queued after a stop token (before the host knew) is not decode time: the phase ends at the mark
    of the step that produced the last token, also where one more was queued before max_new_tokens was reached."""
    model, drafter, _ = tiny_pair("narrow", block_size=8)
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    ids = prompts(model, 1, seed=3)[0]
    run = {"ar": lambda stop, timer: decoder.generate_ar(ids, 30, stop, timer),
           "ddtree": lambda stop, timer: decoder.generate_spec(ids, 30, stop, timer, "ddtree", 16),
           "eager-ar": lambda stop, timer: generate_ar(model, ids, 30, 0.0, None, stop, timer)}[method]
    full = run(set(), PhaseTimer(ids.device)).tokens
    for stop in (set(), {full[9]}):
        clock = _Clock()
        gen = run(stop, clock)
        steps = len(gen.accepted) if method == "ddtree" else len(gen.tokens) - 1   # one mark per step
        assert clock.totals_ms()["decode"] == 1000 * steps, (stop, gen.tokens)


def test_support_names_what_keeps_a_run_eager():
    model = tiny_model("narrow")
    drafter = tiny_drafter(model)
    assert graph_support(model, drafter, torch.device("cpu")) == "not on CUDA"
    assert graph_support(model, drafter, torch.device("cuda")) is None
    drafter.layers[0].self_attn.is_causal = True
    assert "drafter" in graph_support(model, drafter, torch.device("cuda"))


def test_hybrid_support_follows_the_supported_transformers_range(monkeypatch):
    import transformers

    from tests.test_hybrid_lossless import tiny_hybrid_pair

    model = tiny_hybrid_pair("3to1")[0]
    assert graph_support(model, None, torch.device("cuda")) is None
    monkeypatch.setattr(transformers, "__version__", "5.1.0")
    assert "HybridTarget supports transformers" in graph_support(model, None, torch.device("cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("method,budget", [("ar", 0), ("dflash", 0), ("ddtree", 32)])
def test_cuda_graph_replays_equal_eager_steps(method, budget, temperature):
    """Greedy and sampled: a replayed step draws what the eager step draws (the default generator's offset
    advances by the captured step's draws at every replay)."""
    model, drafter, _ = tiny_pair("wide", block_size=8)
    model, drafter = model.cuda(), drafter.cuda()
    eager = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    graphed = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=True)
    for seed, ids in enumerate(prompts(model, 4, seed=4)):
        ids = ids.cuda()
        timer = PhaseTimer(ids.device)
        run = (lambda d: d.generate_ar(ids, 48, set(), timer, temperature, seed)) if method == "ar" else \
            (lambda d: d.generate_spec(ids, 48, set(), timer, method, budget, temperature=temperature, seed=seed))
        assert run(graphed).tokens == run(eager).tokens, seed
    assert graphed.replays.captured and graphed.graphs, graphed.replays.fallback


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("method,budget", [("ar", 0), ("ddtree", 32)])
def test_phase_split_times_every_phase_and_leaves_the_decoder_as_it_was(method, budget):
    from remote.decoding.phase_split import split_step

    model, drafter, _ = tiny_pair("wide", block_size=8)
    model, drafter = model.cuda(), drafter.cuda()
    plain, split = (GraphDecoder(model, drafter, drafter.target_layer_ids) for _ in range(2))
    timer = PhaseTimer(torch.device("cuda"))
    run = (lambda d, ids: d.generate_ar(ids, 24, set(), timer)) if method == "ar" else \
        (lambda d, ids: d.generate_spec(ids, 24, set(), timer, method, budget))
    first, second = (ids.cuda() for ids in prompts(model, 2, seed=6))
    assert run(split, first).tokens == run(plain, first).tokens
    state = [t.clone() for t in split.state.committed()]
    phases = split_step(split, method, budget, repeats=5)
    assert set(phases) == ({"forward_ms"} if method == "ar" else {"draft_ms", "tree_build_ms", "verify_ms",
                                                                  "commit_ms"})
    assert all(v >= 0 for v in phases.values()) and sum(phases.values()) > 0, phases
    after = split.state.committed()
    assert all(torch.equal(a, b) for a, b in zip(after, state))
    assert run(split, second).tokens == run(plain, second).tokens


def test_spec_step_stopped_after_a_phase_leaves_the_committed_state():
    model, drafter, _ = tiny_pair("narrow", block_size=8)
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    ids = prompts(model, 1, seed=7)[0]
    decoder.generate_spec(ids, 8, set(), PhaseTimer(ids.device), "ddtree", 16)
    live = decoder.state
    state = [t.clone() for t in live.committed()]
    with torch.inference_mode():          # as generate_spec
        shapes = {until: decoder._spec_step(live.context, live.context_rows, True, 16, until=until).shape
                  for until in ("draft", "tree_build", "verify")}
        assert shapes["verify"] == (17,) and shapes["draft"][0] == 7, shapes
        assert all(torch.equal(a, b) for a, b in zip(live.committed(), state))
        decoder._spec_step(live.context, live.context_rows, True, 16)
    assert not torch.equal(live.start, state[0])


def test_a_step_that_cannot_be_captured_turns_graphs_off(monkeypatch):
    """The capture fails (as a forward that reads a device value would): the warm-up step's result stands, every
    later step runs eagerly, the tokens are the eager loop's, and `fallback` says why."""
    model, drafter, target = tiny_pair("wide", block_size=8)
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=True)
    monkeypatch.setattr(decoder.replays, "warm_up", lambda step: step())     # no CUDA stream on this machine

    def refuse(step):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")
    monkeypatch.setattr(decoder.replays, "capture", refuse)
    ids = prompts(model, 1, seed=2)[0]                   # a prompt whose continuation does not repeat one token
    eager, static = _both(decoder, target, drafter, model, ids, 30, set(), "ddtree", 16)
    assert not decoder.graphs
    assert decoder.replays.fallback == "RuntimeError: operation not permitted when stream is capturing"
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
def test_hybrid_speculative_steps_equal_the_eager_loop(shape):
    """HybridGraphDecoder's DFlash and DDTree steps (verify on reserved state at a device-side length, commit
    moving K/V rows and recomputing GDN states over the accepted path padded with no-op steps) emit the eager
    loop's tokens and acceptances."""
    from tests.test_hybrid_lossless import tiny_hybrid_pair

    model, drafter, target = tiny_hybrid_pair(shape)
    decoder = HybridGraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    g = torch.Generator().manual_seed(4)
    deepest = {}
    for length in (2, 9, 5, 4):
        ids = torch.randint(0, model.config.vocab_size - 1, (1, length), generator=g)
        timer = PhaseTimer(ids.device)
        for method, budget in [("dflash", 0), ("ddtree", 8), ("ddtree", 256)]:
            eager = generate_spec(target, drafter, model, ids, 40, 0.0, None, set(), timer, method, budget)
            static = decoder.generate_spec(ids, 40, set(), timer, method, budget)
            assert (static.tokens, static.accepted) == (eager.tokens, eager.accepted), (method, budget)
            deepest[method, budget] = max([deepest.get((method, budget), 0)] + static.accepted)
    # paths are padded to the tree height with no-op steps; deep trees moved K/V rows and installed mid-tree states
    assert deepest["dflash", 0] >= 1 and deepest["ddtree", 256] >= 2, deepest

    # sampled (temperature 1), the steps draw the loop's numbers in its order too
    for seed, length in enumerate((3, 6)):
        ids = torch.randint(0, model.config.vocab_size - 1, (1, length), generator=g)
        for method, budget in [("dflash", 0), ("ddtree", 8)]:
            eager, static = _both(decoder, target, drafter, model, ids, 24, set(), method, budget, 1.0, seed)
            assert (static.tokens, static.accepted) == (eager.tokens, eager.accepted), ("T=1", method, budget)


@pytest.mark.parametrize("shape", ["3to1", "1to1"])
@pytest.mark.parametrize("seed", range(3))
def test_hybrid_static_commit_equals_the_eager_commit(shape, seed, paths=4):
    """verify_static + commit_static (device start, path padded to the tree height) leave the logits, features
    and every layer's state of HybridTarget's eager verify + commit, on chains and trees, for `paths` paths."""
    import random

    from remote.models.gdn import TreeLayout
    from remote.models.hybrid_target import HybridTarget, Static
    from remote.tree import Ancestry
    from tests.test_hybrid_lossless import tiny_hybrid_pair
    from tests.test_hybrid_models import ancestor_path, random_tree

    model = tiny_hybrid_pair(shape)[0]
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    parents = list(range(-1, 7)) if seed == 0 else random_tree(rng, 12, reach=3)
    tree = Ancestry.from_parents(parents)
    prompt, nodes = torch.randint(0, 10, (1, 5), generator=g), torch.randint(0, 10, (len(parents),), generator=g)
    for last in rng.sample(range(len(parents)), paths):
        path = ancestor_path(parents, last)
        eager, static = HybridTarget(model, [0]), HybridTarget(model, [0])
        eager.prefill(prompt)
        expected = eager.verify(nodes, parents)
        eager.commit(path)
        static.reserve(32)
        static.prefill(prompt)
        start, cols = torch.tensor(5), torch.arange(32)
        offset = cols - start
        visible = tree.visible.index_select(1, offset.clamp(0, len(parents) - 1)) & (offset >= 0) & \
            (offset < len(parents)) | (offset < 0)
        step = Static(start, visible, TreeLayout.build(tree, static.conv_kernel))
        got = static.verify_static(nodes, step)
        padded = path + [last] * (tree.height - len(path))
        static.commit_static(step, torch.tensor(padded), torch.tensor(len(path)))
        assert torch.allclose(got.logits, expected.logits, atol=1e-5)
        assert torch.allclose(got.features, expected.features, atol=1e-5)
        static._len = eager.length                     # commit_static leaves the host length to its caller
        for layer in range(len(static.layer_types)):
            for name, value in eager.layer_state(layer).items():
                assert torch.allclose(static.layer_state(layer)[name], value, atol=1e-5), (path, layer, name)


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
        for method, budget in [("dflash", 0), ("ddtree", 32)]:
            assert graphed.generate_spec(ids, 40, set(), timer, method, budget).tokens == \
                eager.generate_spec(ids, 40, set(), timer, method, budget).tokens
    assert len(graphed.replays.captured) == 3 and graphed.graphs, graphed.replays.fallback


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


@pytest.mark.parametrize("kind, part, graphs", [("compiled", "steps", 2), ("compiled_drafter", "drafter", 1)])
def test_compiled_steps_decode_the_eager_tokens(kind, part, graphs):
    """compile_steps (the AR and DDTree steps torch.compile'd) and compile_drafter (the draft only): inductor (C++
    on a CPU) leaves the tokens and every step's acceptance as the plain steps have them."""
    model, drafter, _ = tiny_pair("narrow", block_size=8)
    drafter.fuse_projections()                              # as the runner loads it (remote.models.loading)
    from torch._dynamo.utils import counters

    plain = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    compiled = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False, **{kind: True})
    ids = prompts(model, 1, seed=2)[0]
    timer = PhaseTimer(ids.device)
    graphs_before = counters["stats"]["unique_graphs"]
    assert compiled.generate_ar(ids, 24, set(), timer).tokens == plain.generate_ar(ids, 24, set(), timer).tokens
    spec = [d.generate_spec(ids, 24, set(), timer, "ddtree", 8) for d in (compiled, plain)]
    assert spec[0].tokens == spec[1].tokens and spec[0].accepted == spec[1].accepted
    assert getattr(compiled.compile, part) and counters["stats"]["unique_graphs"] >= graphs_before + graphs


def test_compiled_step_glue_equals_the_plain_ops():
    """What captured steps run compiled (`active`): the tree's view of the cache (`tree_visible`) against its
    definition from the ancestor mask, and the walk (`accept`), compiled by inductor (C++ here) against plain, on
    random trees at random committed lengths, a chain among them."""
    from remote.decoding.graph import tree_visible
    from remote.decoding.loop import accept
    from remote.tree import Ancestry

    g = torch.Generator().manual_seed(11)
    visible_c, accept_c = torch.compile(tree_visible, dynamic=False), torch.compile(accept, dynamic=False)
    cols, vocab = torch.arange(48), 5
    walked = set()
    for case in range(6):
        n = 12
        parents = [-1, 0] + [int(torch.randint(0, i, (), generator=g)) for i in range(2, n)] if case else \
            list(range(-1, n - 1))
        tree = Ancestry.from_parents(parents)
        start = torch.tensor(int(torch.randint(0, 30, (), generator=g)))
        offset = cols - start
        want = (tree.visible.index_select(1, offset.clamp(0, n - 1)) & (offset >= 0) & (offset < n)) | (offset < 0)
        assert torch.equal(tree_visible(tree.ancestors, tree.depth, cols, start), want)
        assert torch.equal(visible_c(tree.ancestors, tree.depth, cols, start), want)
        nodes, samples = torch.randint(0, vocab, (n,), generator=g), torch.randint(0, vocab, (n,), generator=g)
        draft = torch.randn(tree.height, vocab, generator=g)
        got, plain = accept_c(tree, nodes, samples, draft), accept(tree, nodes, samples, draft)
        assert all(torch.equal(a, b) for a, b in zip(got, plain)), case
        walked.add(int(plain[2]))
    assert max(walked) > 1                  # some walks went past the first drafted node
