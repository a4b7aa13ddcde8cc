"""The pure-attention targets' own layer loop (remote.models.attention_loop): on a static cache it gives the logits
and drafter features of transformers' forward for the same rows and mask, plain and inside the captured steps'
kernels (residual adds with their norms and q / k norms with the rotary compiled), and says which models it cannot
run."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from remote.kernels.glue import _CACHE, add_rms_norm, norm_rotary
from remote.kernels.step import _gathered_embedding, step_kernels
from remote.models.attention_loop import AttentionLoop
from remote.models.attention_target import AttentionTarget
from remote.models.static_cache import StaticKV, visibility_mask
from remote.tree import Ancestry
from tests.test_hybrid_models import real_token_ids

CAPACITY = 32
PARENTS = [-1, 0, 0, 1, 1, 2]


def _tiny(kind: str) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    sizes = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16)
    if kind == "qwen3":
        return Qwen3ForCausalLM(Qwen3Config(**sizes)).eval()
    return LlamaForCausalLM(LlamaConfig(**sizes)).eval()


def _verify_both(model: nn.Module, layers: list[int]):
    """A prompt through transformers' forward, then one tree verified by transformers' forward and by the loop on
    the same cache rows: (theirs, ours)."""
    ids = torch.tensor(real_token_ids()[1][:14])
    prompt, nodes = ids[None, :8], ids[8:8 + len(PARENTS)]
    tree = Ancestry.from_parents(PARENTS, torch.device("cpu"))
    cols = torch.arange(CAPACITY)
    kv = StaticKV(model, CAPACITY)
    target = AttentionTarget(model, layers)
    target.cache = kv
    start = prompt.shape[1]
    with torch.no_grad():
        kv.slots = torch.arange(start)
        target.forward(prompt, kv.slots[None], visibility_mask(cols[None] <= kv.slots[:, None], torch.float32))
        offset = cols - start
        inside = (offset >= 0) & (offset < tree.size)
        visible = (tree.visible.index_select(1, offset.clamp(0, tree.size - 1)) & inside) | (offset < 0)
        positions = start + tree.depth
        kv.slots = start + torch.arange(tree.size)
        theirs = target.forward(nodes[None], positions[None], visibility_mask(visible, torch.float32))
        ours = AttentionLoop(model, layers).forward(nodes[None], positions, kv, visible, featured=True)
    return theirs, ours


@pytest.mark.parametrize("kind", ["qwen3", "llama"])
def test_the_loop_gives_transformers_logits_and_features(kind):
    model = _tiny(kind)
    assert AttentionLoop.unsupported(model) is None
    theirs, ours = _verify_both(model, [0, 2])
    assert ours.logits.shape == theirs.logits.shape and ours.features.shape == theirs.features.shape
    assert (ours.logits - theirs.logits).abs().max() < 1e-5
    assert (ours.features - theirs.features).abs().max() < 1e-5


def test_inside_the_step_kernels_the_adds_norms_and_rotary_are_compiled():
    """With the compiled glue (the captured steps'), every residual add runs with its norm and q / k norms with the
    rotary, compiled (inductor on the CPU here), the embedding gathers its rows, and the logits stay transformers'
    up to rounding."""
    model = _tiny("qwen3")
    theirs, _ = _verify_both(model, [1])
    table = model.get_input_embeddings()
    with step_kernels(model, compiled=True):
        assert table.forward.__func__ is _gathered_embedding         # a step's rows in one gather (torch ops here)
        _, ours = _verify_both(model, [1])
    assert "forward" not in vars(table)                                 # the module's own forward again
    assert all(_CACHE[fn].compiled is not None for fn in (add_rms_norm, norm_rotary))     # compiled, and ran so
    assert (ours.logits - theirs.logits).abs().max() < 1e-4
    assert (ours.features - theirs.features).abs().max() < 1e-4


def test_a_model_of_other_parts_or_type_is_refused_with_the_reason():
    from transformers import GraniteConfig, GraniteForCausalLM

    model = _tiny("qwen3")
    del model.model.layers[1].self_attn.o_proj
    assert "decoder layer 1" in AttentionLoop.unsupported(model)
    assert "model type None" in AttentionLoop.unsupported(nn.Linear(2, 2))
    # the same parts as Llama's, but residuals scaled inside the layer's forward: the loop would compute otherwise
    granite = GraniteForCausalLM(GraniteConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                               num_attention_heads=2, num_key_value_heads=1))
    assert "'granite'" in AttentionLoop.unsupported(granite)
