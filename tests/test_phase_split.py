"""The phase split (remote.decoding.phase_split) measures a step only where the reserved caches hold it.

A generation's last step may commit up to a block past the length its caches were sized to launch at, so the
state it ends in can lack room for one more step: on the GPU, the split's step there indexed past the reserved
rows (a device-side assert, which poisons the CUDA context: bench_methods died after its DFlash row on the demo
hybrid pair). Here the same states are reached on the CPU, where the out-of-range write raises an IndexError, with
the demo pairs at caches sized exactly as bench_methods sizes them; every prefix step the split captures then
runs eagerly from the measured state."""
from __future__ import annotations

import pytest
import torch

from remote.assets import ASSETS
from remote.decoding.auto_budget import PLAIN
from remote.decoding.graph import GraphDecoder, HybridGraphDecoder
from remote.decoding.phase_split import measured_state, prefix_steps, split_step
from remote.kernels.gdn_paths import torch_gdn_path
from remote.models.loading import load_drafter_for, load_target, load_tokenizer
from remote.prompts import encode, load_prompts
from remote.spec import DatasetSpec, DrafterSpec, Method, ModelSpec
from remote.timing import PhaseTimer
from tests.runner_fixtures import prompts, tiny_pair

MODELS = ASSETS / "models"


def demo_pair(name: str, device: str = "cpu"):
    """The shipped demo pair `name` (demo-qwen3 | demo-qwen3_5) in float32, a graph decoder with graphs off, and the
    held-out prompts."""
    spec = ModelSpec(path=str(MODELS / name), dtype="float32")
    tokenizer = load_tokenizer(spec)
    model = load_target(spec, 0, torch.device(device))
    drafter = load_drafter_for(DrafterSpec(path=str(MODELS / f"{name}-dflash")), model, tokenizer, 0)
    kind = HybridGraphDecoder if "qwen3_5" in name else GraphDecoder
    dataset = DatasetSpec(name="jsonl", path=str(MODELS / "heldout_prompts.jsonl"), num_prompts=6)
    return kind(model, drafter, drafter.target_layer_ids, graphs=False), encode(tokenizer, load_prompts(dataset),
                                                                                 dataset)


def end_without_room(decoder, inputs, method: str, budget: int):
    """Decode a prompt (caches sized exactly, as bench_methods does), then step on as a generation's last steps may
    (the step launched behind the last one read commits too) until one more step would write past the reserved
    target rows; returns how many rows past."""
    ids, method = inputs[0].to(decoder.device), Method(method)
    decoder.reserve(ids.shape[1], 16, method, budget, exact=True)
    decoder.generate_spec(ids, 16, set(), PhaseTimer(ids.device), method, budget)
    state, width = decoder.state, decoder._width(method, budget)
    with torch.inference_mode():
        while int(state.start) + width <= decoder.capacity:
            decoder._spec_step(decoder.draft_context(), state.context_rows, method.builds_tree, budget)
    return int(state.start) + width - decoder.capacity


def tiny_generation(method: str, budget: int, max_new: int) -> GraphDecoder:
    """The narrow tiny pair's decoder after one exactly reserved generation of `method`."""
    model, drafter, _ = tiny_pair("narrow", block_size=8)
    decoder = GraphDecoder(model, drafter, drafter.target_layer_ids, graphs=False)
    ids = prompts(model, 1, seed=3)[0]
    decoder.reserve(ids.shape[1], max_new, method, budget, exact=True)
    decoder.generate_spec(ids, max_new, set(), PhaseTimer(ids.device), method, budget)
    return decoder


def committed(decoder) -> list[torch.Tensor]:
    return [t.clone() for t in decoder.state.committed()]


@pytest.mark.parametrize("name,method,budget", [("demo-qwen3", "dflash", 1), ("demo-qwen3", "ddtree", 31),
                                                ("demo-qwen3_5", "dflash", 1)])
def test_every_prefix_step_fits_the_reserved_caches_at_the_end_of_a_generation(name, method, budget):
    decoder, inputs = demo_pair(name)
    method, state = Method(method), decoder.state
    with torch_gdn_path():       # transformers sends hybrid layers to fla whenever installed, CPU tensors too
        end_without_room(decoder, inputs, method, budget)
        before = committed(decoder)
        with torch.inference_mode(), pytest.raises(IndexError, match="out of bounds"):
            # what the split ran into
            decoder._spec_step(state.context, state.context_rows, method.builds_tree, budget)
        with measured_state(decoder, method, budget) as restore:
            assert int(state.start) + decoder._width(method, budget) <= decoder.capacity
            measured = int(state.start)
            phases = []
            for phase, step in prefix_steps(decoder, method, budget):
                restore()
                step()
                phases.append(phase)
            assert int(state.start) > measured            # the whole step committed, inside the reserved rows
            restore()
            assert int(state.start) == measured
        assert phases == ["draft", "tree_build", "verify", "commit"]
        assert all(torch.equal(a, b) for a, b in zip(committed(decoder), before))


def test_ar_measures_where_the_last_generation_ended():
    """AR's step writes one row: a speculative generation's end state holds it, so nothing moves."""
    decoder = tiny_generation("ddtree", 16, 12)
    before = committed(decoder)
    with measured_state(decoder, Method.AR, 1) as restore:
        assert torch.equal(decoder.state.start, before[0])
        (_, step), = prefix_steps(decoder, Method.AR, 1)
        restore()
        step()
    assert all(torch.equal(a, b) for a, b in zip(committed(decoder), before))


def test_autos_ar_step_is_split_from_a_full_pending_context():
    """tree_budget=auto's AR step (PLAIN) appends one drafter context row: measured from a state whose pending
    context is full, one row is made free for it, and the decoder's own state is back afterwards."""
    decoder = tiny_generation("ddtree", 16, 12)
    decoder.state.context_rows.fill_(decoder.state.context.shape[1])      # as after a streak of AR steps
    before = committed(decoder)
    with measured_state(decoder, Method.DDTREE, PLAIN) as restore:
        (phase, step), = prefix_steps(decoder, Method.DDTREE, PLAIN)
        restore()
        start, rows = int(decoder.state.start), int(decoder.state.context_rows)
        step()
        assert phase == "forward" and int(decoder.state.start) == start + 1
        assert int(decoder.state.context_rows) == rows + 1 == decoder.state.context.shape[1]
    assert all(torch.equal(a, b) for a, b in zip(committed(decoder), before))


def test_caches_that_cannot_hold_one_step_are_refused_on_the_host():
    """Reserved for DFlash, measured as a DDTree step wider than every reserved row: a one-line ValueError naming
    the rows, raised before any kernel runs, and the committed state untouched."""
    decoder = tiny_generation("dflash", 1, 8)
    before = committed(decoder)
    with pytest.raises(ValueError, match=rf"cannot hold one ddtree step of {decoder.capacity + 1} rows") as error:
        with measured_state(decoder, Method.DDTREE, decoder.capacity):
            pytest.fail("a state without room was measured")
    assert "\n" not in str(error.value) and f"{decoder.capacity} target rows" in str(error.value)
    assert all(torch.equal(a, b) for a, b in zip(committed(decoder), before))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("method,budget", [("dflash", 1), ("ddtree", 31)])
def test_split_at_the_end_of_exactly_sized_caches_leaves_the_device_usable(method, budget):
    """bench_methods' case on the GPU: the split after a generation that ended without room times every phase,
    and the next generation still gives the eager steps' tokens."""
    decoder, inputs = demo_pair("demo-qwen3_5", "cuda")
    graphed = HybridGraphDecoder(decoder.model, decoder.drafter, decoder.drafter.target_layer_ids)
    end_without_room(graphed, inputs, method, budget)
    phases = split_step(graphed, method, budget, repeats=3)
    assert set(phases) == {"draft_ms", "tree_build_ms", "verify_ms", "commit_ms"} and sum(phases.values()) > 0
    ids = inputs[0].cuda()
    timer = PhaseTimer(ids.device)
    assert graphed.generate_spec(ids, 16, set(), timer, method, budget).tokens == \
        decoder.generate_spec(ids, 16, set(), timer, method, budget).tokens
