"""Reduced draft vocabularies (remote.models.draft_vocab, remote.calibration, remote.models.speculators_format): a
head over N of the target's V tokens drafts the trees a full head masked to those N would draft, accepts what it
accepts, and every method stays lossless (fp32, temperature 0, pure-attention and hybrid targets, the eager loop and
the graph decoder's steps, captured in CUDA graphs on a GPU); a speculators-format checkpoint made from the demo
drafter loads with its vocabulary and runs; a calibration text holding an evaluated prompt is refused."""
from __future__ import annotations

import types

import pytest
import torch

from remote.calibration import outside_share, read_calibration, reduce_draft_vocab, stdlib_text
from remote.decoding.graph import GraphDecoder, HybridGraphDecoder
from remote.decoding.loop import build, generate_ar, generate_spec
from remote.decoding.tree_build import argmax_chain, best_first_tree
from remote.errors import SpecError
from remote.models.draft_vocab import DraftVocab, count_tokens, most_frequent
from remote.models.drafter_io import load_drafter
from remote.spec import DrafterSpec
from remote.timing import PhaseTimer
from tests.runner_fixtures import prompts, tiny_pair
from tests.speculators_checkpoint import save_speculators
from tests.test_hybrid_lossless import tiny_hybrid_pair

METHODS = [("dflash", 0), ("ddtree", 1), ("ddtree", 8), ("ddtree", 64)]


def reduce(drafter, model, ids: list[int]) -> torch.Tensor:
    ids = torch.tensor(ids)
    drafter.vocab = DraftVocab.from_head(ids, model.get_output_embeddings().weight, "test")
    return ids


def masked_twin(drafter, ids: torch.Tensor):
    """The same drafter with the target's whole head, its logits -inf outside `ids`: what the reduced head must
    equal, tree for tree."""
    vocab, drafter.vocab = drafter.vocab, None
    outside = torch.ones(drafter.config.vocab_size, dtype=torch.bool)
    outside[ids] = False
    plain = type(drafter).logits

    def logits(self, hidden, lm_head):
        return plain(self, hidden, lm_head).masked_fill(outside.to(hidden.device), float("-inf"))

    drafter.logits = types.MethodType(logits, drafter)
    return lambda: (vars(drafter).pop("logits"), setattr(drafter, "vocab", vocab))


@pytest.mark.parametrize("budget", [0, 1, 8, 64])
def test_trees_of_a_reduced_head_are_the_masked_full_heads(budget):
    model, drafter, _ = tiny_pair("wide")
    ids = reduce(drafter, model, [0, 2, 3, 7, 11, 12])
    g = torch.Generator().manual_seed(budget)
    for _ in range(5):
        full = torch.randn(7, 16, generator=g)
        masked = torch.full_like(full, float("-inf"))
        masked[:, ids] = full[:, ids]
        got = build(drafter, full[:, ids], budget > 0, budget)
        want = best_first_tree(masked, budget) if budget else argmax_chain(masked)
        assert got.tokens.tolist() == want.tokens.tolist()
        assert got.parents.tolist() == want.parents.tolist() and got.depths.tolist() == want.depths.tolist()
        assert set(got.tokens.tolist()) <= set(ids.tolist())


def _generations(decoder, target, drafter, model, ids, method, budget):
    timer = PhaseTimer(ids.device)
    eager = generate_spec(target, drafter, model, ids, 40, 0.0, None, set(), timer, method, budget)
    static = decoder.generate_spec(ids, 40, set(), timer, method, budget)
    return eager, static


@pytest.mark.parametrize("kind", ["attention", "hybrid"])
def test_a_reduced_head_is_lossless_and_accepts_as_the_masked_full_head(kind):
    if kind == "attention":
        model, drafter, target = tiny_pair("wide", block_size=8)
        decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
        inputs = prompts(model, 4, seed=5)
        ids = reduce(drafter, model, [0, 1, 2, 4, 5, 8, 9, 13])
    else:
        model, drafter, target = tiny_hybrid_pair("3to1")
        decoder = HybridGraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
        g = torch.Generator().manual_seed(5)
        inputs = [torch.randint(0, 15, (1, 5 + i), generator=g) for i in range(3)]
        ids = reduce(drafter, model, [0, 1, 2, 3, 4, 6, 7, 8, 10, 11, 12, 14])
    timer, outside, deepest = PhaseTimer(torch.device("cpu")), 0, 0
    for prompt in inputs:
        ar = generate_ar(model, prompt, 40, 0.0, None, set(), timer).tokens
        outside += sum(t not in ids.tolist() for t in ar)
        for method, budget in METHODS:
            reduced = _generations(decoder, target, drafter, model, prompt, method, budget)
            restore = masked_twin(drafter, ids)
            try:
                twin = _generations(decoder, target, drafter, model, prompt, method, budget)
            finally:
                restore()
            for gen in reduced:
                assert gen.tokens == ar, (method, budget)
            assert reduced[0].accepted == reduced[1].accepted == twin[0].accepted == twin[1].accepted
            assert reduced[0].stats == twin[0].stats and reduced[1].stats == twin[1].stats
            deepest = max([deepest] + reduced[0].accepted)
    assert outside and deepest >= 2     # tokens the drafter could not draft, and multi-token acceptance, happened


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA")
def test_cuda_graphed_steps_of_a_reduced_head_replay_ars_tokens():
    """On CUDA each method's step is captured with the reduced head inside it (draft ids mapped back to the
    target's within the graph) and replayed: every method's tokens stay AR's."""
    model, drafter, _ = tiny_pair("wide", block_size=8)
    ids = reduce(drafter, model, [0, 1, 2, 4, 5, 8, 9, 13])
    model, drafter = model.cuda(), drafter.cuda()
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids)
    inputs = [prompt.cuda() for prompt in prompts(model, 4, seed=5)]
    decoder.reserve(max(prompt.shape[1] for prompt in inputs), 40, "ddtree", 64)
    outside = 0
    for prompt in inputs:
        timer = PhaseTimer(prompt.device)
        ar = decoder.generate_ar(prompt, 40, set(), timer).tokens
        outside += sum(t not in ids.tolist() for t in ar)
        for method, budget in METHODS:
            assert decoder.generate_spec(prompt, 40, set(), timer, method, budget).tokens == ar, (method, budget)
    assert decoder.graphs and decoder.replays.captured, decoder.replays.fallback
    assert outside                       # tokens the drafter could not draft came up


def test_most_frequent_ranks_by_count_then_id_and_fills_with_the_lowest_ids():
    counts = torch.tensor([0, 5, 2, 5, 0, 9, 0, 1])
    assert most_frequent(counts, 3).tolist() == [1, 3, 5]
    assert most_frequent(counts, 6).tolist() == [0, 1, 2, 3, 5, 7]          # 0: the lowest id never seen
    among = torch.tensor([0, 2, 4, 6, 7])
    assert most_frequent(counts, 2, among).tolist() == [1, 4]                # positions into `among`: ids 2 and 7
    with pytest.raises(SpecError, match="from 2 to 8"):
        most_frequent(counts, 9)


def test_calibration_counts_the_text_and_refuses_the_evaluated_prompts(tmp_path):
    from remote.models.loading import load_tokenizer
    from remote.spec import ModelSpec
    from tests.runner_fixtures import TINY_QWEN3

    tok = load_tokenizer(ModelSpec(random=dict(TINY_QWEN3)))
    text = "def add(a, b):\n    return a + b\n" * 3
    counts = count_tokens(tok, text, 1024)
    assert int(counts.sum()) == len(tok(text, add_special_tokens=False)["input_ids"])
    path = tmp_path / "cal.txt"
    path.write_text(text + "# the run's prompt: write a function that sorts a list of numbers\n")
    assert read_calibration(str(path), ["short", "another prompt nowhere in the text at all"])
    with pytest.raises(SpecError, match="holds the run's prompt 1 verbatim"):
        read_calibration(str(path), ["x", "write a function that sorts a list of numbers"])
    with pytest.raises(SpecError, match="is not a file"):
        read_calibration(str(tmp_path / "missing.txt"), [])


def test_the_default_calibration_is_the_hosts_standard_library_less_any_file_holding_a_prompt():
    """`stdlib`: about 1 MB of the host Python's own sources, the same text each time; a file holding an evaluated
    prompt (one of its lines here) is left out rather than refused, and another takes its place."""
    text = stdlib_text([])
    assert 1_000_000 <= len(text.encode()) <= 1_000_000 + 64 * 1024 and text == stdlib_text([])
    line = max(text.splitlines()[:400], key=len)            # a long line of the first file or so
    assert len(line.strip()) >= 32
    without = stdlib_text(["short", line])
    assert line not in without and len(without.encode()) >= 1_000_000


def test_a_speculators_checkpoint_of_the_demo_drafter_loads_and_runs(tmp_path):
    """The demo drafter saved as speculators saves one (its head cut to the 1024 tokens most frequent in the
    default calibration text), loaded back: the same layers, the vocabulary of its d2t, its logits the target
    head's at those ids; then a run drafts with it, losslessly, and reports the vocabulary and AR's tokens
    outside it; drafter.draft_vocab cuts it further."""
    from remote.assets import resolve
    from remote.runner import Run, run
    from remote.spec import CALIBRATION, DatasetSpec, DecodingSpec, ModelSpec, RunSpec

    models = resolve("assets:models")
    spec = RunSpec(run_id="t", model=ModelSpec(path=f"{models}/demo-qwen3"),
                   drafter=DrafterSpec(path=f"{models}/demo-qwen3-dflash", draft_vocab=1024),
                   decoding=DecodingSpec(method="ddtree", tree_budget=15, max_new_tokens=24, warmup=0),
                   dataset=DatasetSpec(num_prompts=2), device="cpu")
    demo = Run(spec)
    ids = demo.drafter.vocab.ids.cpu()
    path = save_speculators(demo.drafter, demo.model, ids, tmp_path / "spec")
    loaded = load_drafter(str(path), torch.float32, "cpu")
    assert torch.equal(loaded.vocab.ids, ids) and loaded.target_layer_ids == demo.drafter.target_layer_ids
    for name, tensor in demo.drafter.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    hidden = torch.randn(3, demo.model.config.hidden_size)
    full = demo.model.get_output_embeddings()(hidden)
    assert torch.allclose(loaded.logits(hidden, None), full[:, ids], atol=1e-5)

    spec.drafter = DrafterSpec(path=str(path), calibration=CALIBRATION)
    (tmp_path / "run").mkdir()
    results = run(spec, str(tmp_path / "run"))
    metrics = results["metrics"]
    assert metrics["draft_vocab"] == 1024 and metrics["exact_match_vs_ar"] == 1.0
    assert 0 < metrics["ar_outside_draft_vocab"] < 0.5
    assert results["environment"]["draft_vocab_source"] == "checkpoint (1024 tokens)"
    spec.drafter.draft_vocab = 512
    cut = Run(spec)
    assert cut.drafter.vocab.size == 512 and set(cut.drafter.vocab.ids.tolist()) <= set(ids.tolist())
    assert "of the checkpoint's 1024" in cut.drafter.vocab.source


def test_a_broken_speculators_checkpoint_is_refused(tmp_path):
    import json

    model, drafter, _ = tiny_pair("wide")
    path = save_speculators(drafter, model, torch.tensor([0, 3, 5, 9]), tmp_path / "spec")
    raw = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**raw, "draft_vocab_size": 5}))
    with pytest.raises(SpecError, match="d2t has 4 entries and lm_head 4 rows, draft_vocab_size is 5"):
        load_drafter(str(path), torch.float32, "cpu")
    (path / "config.json").write_text(json.dumps({**raw, "speculators_model_type": "eagle3"}))
    with pytest.raises(SpecError, match="speculators 'eagle3' model"):
        load_drafter(str(path), torch.float32, "cpu")


def test_outside_share_and_a_drafter_without_a_reduced_head():
    model, drafter, _ = tiny_pair("narrow")
    assert outside_share(drafter, [1, 2, 3]) == 0.0
    reduce_draft_vocab(drafter, DrafterSpec(), model, None, [])          # no draft_vocab: nothing happens
    assert drafter.vocab is None
    reduce(drafter, model, [1, 2, 5])
    assert outside_share(drafter, [1, 2, 3, 4]) == 0.5


def test_a_head_cut_from_a_target_on_another_device_keeps_its_maps_beside_the_head():
    """reduce_draft_vocab counts on the CPU while the target's head sits on the GPU: the id maps must follow the
    head (2026-12-07, one H100: a 32k head cut after loading failed its first graphed step, `index is on cuda:0,
    different from other tensors on cpu`). The meta device stands in for the GPU."""
    head = torch.empty(16, 4, device="meta")
    vocab = DraftVocab.from_head(torch.tensor([1, 3, 7]), head, "test")
    assert vocab.ids.device == vocab.inverse.device == vocab.weight.device == head.device
    assert vocab.to_target(torch.tensor([0, 2], device="meta")).device == head.device
