"""Projections sharing an input run as one GEMM inside the captured steps (remote.kernels.fused_linear): fewer GEMM
launches, the same logits, no extra weight memory, and transformers' own modules back on exit."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from remote.kernels.fused_linear import fuse, grouped
from remote.kernels.glue import _CACHE, add_zero_centred_norm, compiled_glue, gated_norm, output_gate, silu_mul, \
    zero_centred_norm
from remote.kernels.step import step_kernels
from tests.test_hybrid_models import plain_forward, real_token_ids, tiny_model


class _Linears(TorchFunctionMode):
    """Counts F.linear calls, and the row counts of their weights."""

    def __init__(self):
        super().__init__()
        self.rows: list[int] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.nn.functional.linear:
            self.rows.append(args[1].shape[0])
        return func(*args, **(kwargs or {}))


def _forward(model, ids):
    with _Linears() as linears, torch.no_grad():
        out, _ = plain_forward(model, ids)
    return out.logits, linears.rows


def _weights(model) -> tuple[int, set[int]]:
    """Bytes of every distinct parameter storage, and the storages."""
    storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()}
    return sum(storages.values()), set(storages)


@pytest.mark.parametrize("name", ["qwen3_5-3to1", "qwen3_next"])
def test_each_group_is_one_gemm_with_the_models_logits(name):
    model = copy.deepcopy(tiny_model(name))
    ids = real_token_ids()[0][:12]
    plain, plain_rows = _forward(model, ids)
    size_before, _ = _weights(model)
    groups = fuse(model)
    size_after, storages = _weights(model)
    with step_kernels(model):
        fused, fused_rows = _forward(model, ids)
    again, again_rows = _forward(model, ids)
    # every group's members read one storage: weight memory is unchanged and each group is one tensor
    assert size_after == size_before and all(g.weight.untyped_storage().data_ptr() in storages for g in groups)
    kinds = {tuple(type(m).__name__ for m in g.members) for g in groups}
    assert len(groups) >= model.config.num_hidden_layers and kinds == {("Linear",) * len(g.members) for g in groups}
    saved = sum(len(g.members) - 1 for g in groups)
    assert len(fused_rows) == len(plain_rows) - saved and again_rows == plain_rows
    assert sorted(fused_rows) != sorted(plain_rows) and max(fused_rows) >= max(plain_rows)
    assert (fused - plain).abs().max() < 1e-5 and torch.equal(again, plain)
    assert all("forward" not in vars(m) for g in groups for m in g.members)       # nn.Linear's own again


def test_a_group_fuses_q_k_v_of_transformers_attention_and_refuses_after_a_cast():
    """A pure-attention model through transformers' own attention and MLP forwards: q/k/v and gate/up are one GEMM
    each; a `.to()` that replaces the weights re-fuses them at the next use."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    model = Qwen3ForCausalLM(config).eval()
    ids = torch.tensor([real_token_ids()[1][:10]])
    with torch.no_grad():
        plain = model(ids).logits
        with _Linears() as linears, grouped(model) as count:
            fused = model(ids).logits
    assert count == 2 * config.num_hidden_layers
    assert len(linears.rows) == config.num_hidden_layers * 4 + 1          # qkv, o, gate/up, down; lm_head
    assert (fused - plain).abs().max() < 1e-5
    groups = fuse(model)
    model.to(torch.float64)
    assert not any(g.current() for g in groups)
    with torch.no_grad(), grouped(model):
        cast = model(ids).logits
    assert cast.dtype == torch.float64 and (cast.float() - plain).abs().max() < 1e-4
    assert all(g.current() and g.weight.dtype == torch.float64 for g in fuse(model))


def test_only_plain_linears_are_fused_and_each_member_gets_its_own_rows():
    class Owner(nn.Module):
        def __init__(self, bias_k: bool, k_type=nn.Linear):
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj = nn.Linear(8, 8, bias=False), k_type(8, 4, bias=bias_k), \
                nn.Linear(8, 4, bias=False)

    class MyLinear(nn.Linear):
        pass

    assert fuse(Owner(bias_k=False, k_type=MyLinear)) == []    # a subclass (e.g. a quantised linear)
    owner = Owner(bias_k=True)                                 # a bias on one member only: zeros for the others
    x = torch.randn(3, 8)
    with torch.no_grad():
        want = [owner.q_proj(x), owner.k_proj(x), owner.v_proj(x)]
        with grouped(owner) as count:
            # called in another order than q, k, v, and k twice on another input: each still gets its own rows
            got_v, got_q, other_k, got_k = owner.v_proj(x), owner.q_proj(x), owner.k_proj(x + 1), owner.k_proj(x)
    assert count == 1
    for a, b in zip([got_q, got_k, got_v], want):
        assert torch.allclose(a, b, atol=1e-6)
    assert torch.allclose(other_k, owner.k_proj.bias + x.add(1) @ owner.k_proj.weight.T, atol=1e-6)


def test_the_compiled_glue_is_the_models_own_and_is_undone():
    """remote.kernels.glue: inside, transformers' attention reaches the compiled rotary and each MLP the compiled
    silu_mul (inductor on the CPU here), with the model's logits; on exit the module's own function and forwards are
    back."""
    import transformers.models.qwen3.modeling_qwen3 as modeling
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=16)).eval()
    ids = torch.tensor([real_token_ids()[2][:10]])
    own = modeling.apply_rotary_pos_emb
    with torch.no_grad():
        plain = model(ids).logits
        with compiled_glue(model) as count:
            swapped = modeling.apply_rotary_pos_emb
            fused = model(ids).logits
    assert count == 1 + 2 and swapped is not own                               # one rotary, two MLPs
    assert swapped.compiled is not None and _CACHE[silu_mul].compiled is not None     # both compiled and ran
    assert modeling.apply_rotary_pos_emb is own
    assert all("forward" not in vars(layer.mlp) for layer in model.model.layers)
    assert (fused - plain).abs().max() < 1e-5


def test_the_compiled_norms_residual_adds_and_gates_are_the_models_own():
    """A hybrid's norms (zero-centred, each with the residual add before it, and gated) and GDN gates inside
    `step_kernels(compiled=True)` (compiled) give the verify's logits of transformers' own (outside)."""
    from remote.models.gdn import conv_gates, gates
    from remote.models.hybrid_target import HybridTarget

    model = copy.deepcopy(tiny_model("qwen3_5-3to1"))
    target, ids = HybridTarget(model, [0]), torch.tensor(real_token_ids()[0][:12])
    parents = [-1, 0, 0, 1]

    def verify():
        target.prefill(ids[None, :8])
        return target.verify(ids[8:], parents).logits

    plain = verify()
    with step_kernels(model, compiled=True):
        fused = verify()
    ran = [gated_norm, gates, conv_gates, output_gate, zero_centred_norm, add_zero_centred_norm]
    assert all(_CACHE[fn].compiled is not None for fn in ran)                # compiled, and ran so
    assert (fused - plain).abs().max() < 1e-5


def test_a_glue_function_compiles_for_each_shape_it_meets():
    """`active(fn)` (here the GDN conv's): every window count its own compile (inductor on the CPU here). A dynamic
    compile after the second count would serve the third, tiled for another (a conv that ran 6.7 us a layer where
    its static compile took 1.5: one H200, 2026-12-04, `bench_methods.py $Q35 ... --timeline DIR`)."""
    from torch._dynamo.utils import counters

    from remote.kernels.glue import active
    from remote.models.gdn import conv_gates

    g = torch.Generator().manual_seed(0)
    channels, width = 2 * 3 + 5, 4       # one key head of 3, one value head of 5: shapes no other test compiles

    def windows(n: int):
        args = (torch.randn(channels, width + n, generator=g), torch.randint(0, width + n, (n, width), generator=g),
                torch.randn(channels, width, generator=g), None, torch.randn(1, n, 1, generator=g),
                torch.randn(1, n, 1, generator=g), torch.randn(1, generator=g), torch.randn(1, generator=g),
                (3, 5, 3, 5, 1), "silu")
        compiled, plain = active(conv_gates)(*args), conv_gates(*args)
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(compiled, plain))

    model = nn.Linear(2, 2)                 # no rotary or MLP to swap: `active` alone
    with compiled_glue(model):
        windows(3)
        windows(5)
        before = counters["stats"]["unique_graphs"]
        windows(4)
        assert counters["stats"]["unique_graphs"] == before + 1          # a compile of its own
        windows(5)
        assert counters["stats"]["unique_graphs"] == before + 1          # and each count's kept
