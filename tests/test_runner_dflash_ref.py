"""Cross-check against the authors' module (`dflash` on PyPI, MIT; install with `pip install --no-deps dflash`):
on the same random weights our drafter's output equals theirs (fp32, max abs diff <= 1e-5), a drafter saved in
the published format loads in both, and our DFlash loop takes the same steps as theirs."""
from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from remote.decoding.loop import generate_spec
from remote.models.drafter_io import load_drafter, save_drafter
from remote.models.backends import build_target
from remote.timing import PhaseTimer
from tests.runner_fixtures import prompts, tiny_drafter, tiny_model  # noqa: F401

ref = pytest.importorskip("dflash.model", reason="the authors' module: pip install --no-deps dflash")
TOL = 1e-5


def _theirs_step(model, cache, feats, noise, start):
    positions = torch.arange(start - feats.shape[1], start + noise.shape[1])[None]
    out = model(target_hidden=feats, noise_embedding=noise, position_ids=positions, past_key_values=cache,
                use_cache=True)
    cache.crop(start - cache.get_seq_length())          # upstream: drop the block's K/V (negative = remove)
    return out


def _compare(ours, theirs, hidden: int, steps=((9, 0), (3, 9), (5, 12))):
    """Feed both the same context chunks (C new tokens ending at `start`) and noise blocks; max abs diff."""
    g = torch.Generator().manual_seed(0)
    f_dim = len(ours.target_layer_ids) * hidden
    mine, their_cache, worst = ours.new_cache(), DynamicCache(config=theirs.config), 0.0
    their_cache.activate_past_recording()               # as upstream's own loop does before cropping
    for ctx_len, start_before in steps:
        start = start_before + ctx_len
        feats = torch.randn(1, ctx_len, f_dim, generator=g)
        noise = torch.randn(1, ours.block_size, hidden, generator=g)
        positions = torch.arange(start - ctx_len, start + ours.block_size)
        a = ours(noise, feats, positions, mine)
        b = _theirs_step(theirs, their_cache, feats, noise, start)
        worst = max(worst, (a - b).abs().max().item())
        assert their_cache.get_seq_length() == mine.length == start
    return worst


@torch.inference_mode()
@pytest.mark.parametrize("variant", ["plain", "sliding"])
def test_same_weights_same_output_both_ways(tmp_path, variant):
    model = tiny_model("wide", vocab_size=64)
    extra = {} if variant == "plain" else {"layer_types": ["sliding_attention", "full_attention"],
                                           "use_sliding_window": True, "sliding_window": 64}
    from remote.models.drafter_io import random_drafter
    ours = random_drafter(model, None, {"num_hidden_layers": 2, **extra, "dflash_config": {"mask_token_id": 63}},
                          8, seed=3)
    save_drafter(ours, tmp_path / "ours")
    theirs = ref.DFlashDraftModel.from_pretrained(str(tmp_path / "ours"), dtype=torch.float32).eval()
    assert theirs.target_layer_ids == ours.target_layer_ids and theirs.mask_token_id == 63
    assert theirs.block_size == ours.block_size
    d1 = _compare(ours, theirs, model.config.hidden_size)
    theirs.save_pretrained(str(tmp_path / "theirs"))
    reloaded = load_drafter(str(tmp_path / "theirs"), torch.float32, "cpu")
    d2 = _compare(reloaded, theirs, model.config.hidden_size)
    # as the runner decodes with it: q/k/v and gate/up as one GEMM each, the published parameters unchanged
    published = {name: p.clone() for name, p in reloaded.state_dict().items()}
    fused = reloaded.fuse_projections()
    assert fused.layers[0].self_attn.qkv_weight is not None and fused.layers[0].gate_up_weight is not None
    assert all(torch.equal(published[name], p) for name, p in fused.state_dict().items())
    assert fused.state_dict().keys() == published.keys()
    d3 = _compare(fused, theirs, model.config.hidden_size)
    print(f"\nmax |ours - theirs| ({variant}): saved by us {d1:.1e}, saved by them {d2:.1e}, fused {d3:.1e}")
    assert d1 <= TOL and d2 <= TOL and d3 <= TOL


@torch.inference_mode()
def test_dflash_loop_takes_the_same_steps_as_theirs(tmp_path, monkeypatch):
    """Their `dflash_generate` (greedy) with their drafter loaded from our checkpoint: same tokens, same
    per-step acceptance lengths as our chain loop."""
    import time
    monkeypatch.setattr(ref, "_cuda_time", time.perf_counter)       # theirs times with CUDA syncs only
    model = tiny_model("narrow", vocab_size=8)
    ours = tiny_drafter(model, block_size=6, layers=2)
    save_drafter(ours, tmp_path / "d")
    theirs = ref.DFlashDraftModel.from_pretrained(str(tmp_path / "d"), dtype=torch.float32).eval()
    target = build_target(model, ours.target_layer_ids)
    timer = PhaseTimer(torch.device("cpu"))
    multi = 0
    for ids in prompts(model, 6, seed=2):
        mine = generate_spec(target, ours, model, ids, 40, 0.0, None, set(), timer, "dflash", 0)
        other = ref.dflash_generate(theirs, model, ids, 40, None, temperature=0.0, return_stats=True)
        assert other.output_ids[0, ids.shape[1]:].tolist() == mine.tokens
        assert other.acceptance_lengths[:-1] == mine.committed[:-1]       # the last step is capped differently
        multi += sum(c > 1 for c in mine.committed)
    assert multi > 0
