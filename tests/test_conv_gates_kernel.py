"""remote.kernels.conv_gates against remote.models.gdn.conv_gates (the torch ops), run by Triton's interpreter on the
CPU: N windows gathered by index and one window (AR's step), with and without a conv bias, key heads repeated to
value heads (Qwen3.6-27B's 16 -> 48 in small), b and a as slices of one fused projection's output."""
from __future__ import annotations

import json

import pytest

from tests.interpreted import run_interpreted

pytest.importorskip("triton")

CHECK = r"""
import json, sys
import torch
from remote.kernels import conv_gates as kernel
from remote.models.gdn import conv_gates

out = []
for key_heads, rep, dk, dv, n, windowed, with_bias, dtype, seed in json.loads(sys.argv[1]):
    g = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, dtype)
    hv = key_heads * rep
    key_dim, value_dim, width = key_heads * dk, hv * dv, 4
    channels = 2 * key_dim + value_dim
    bank = torch.randn(channels, width + n, generator=g).to(dtype)
    index = torch.randint(0, width + n, (n, width), generator=g) if windowed else None
    rows = n if windowed else 1
    weight = torch.randn(channels, width, generator=g).to(dtype)
    bias = torch.randn(channels, generator=g).to(dtype) if with_bias else None
    fused = torch.randn(1, rows, 3 * hv, generator=g).to(dtype)      # [z-ish | b | a]: b, a are strided slices
    b, a = fused[..., hv:2 * hv], fused[..., 2 * hv:]
    a_log, dt_bias = torch.randn(hv, generator=g), torch.randn(hv, generator=g)
    shape = (key_dim, value_dim, dk, dv, rep)
    want = conv_gates(bank, index, weight, bias, b, a, a_log, dt_bias, shape, "silu")
    got = kernel.conv_gates_interpreted(bank, index, weight, bias, b, a, a_log, dt_bias, shape, "silu")
    report = {"case": [key_heads, rep, dk, dv, n, windowed, with_bias, str(dtype)[6:], seed]}
    for name, x, y in zip(("q", "k", "v", "g", "beta"), got, want):
        same_shape = tuple(x.shape) == tuple(y.shape) and x.dtype == y.dtype
        close = same_shape and torch.allclose(x.float(), y.float(), rtol=1e-2 if y.dtype == torch.bfloat16 else 1e-5,
                                              atol=1e-2 if y.dtype == torch.bfloat16 else 1e-5)
        report[name] = {"close": bool(close)}
    out.append(report)
print(json.dumps(out))
"""


def test_kernel_equals_the_torch_ops():
    # (key heads, value heads a key head, Dk, Dv, nodes, windows by index, conv bias, dtype, seed). The interpreter
    # rounds float32 to bfloat16 by truncation (the GPU to nearest even), so bf16 cases are held to one bf16 step;
    # float32 ones to float32 rounding (the window's sums in another order, silu and softplus by other formulas)
    cases = [(4, 1, 64, 64, 16, True, False, "bfloat16", 0), (2, 3, 16, 8, 5, True, True, "bfloat16", 1),
             (4, 1, 64, 64, 1, False, False, "bfloat16", 2), (2, 3, 16, 8, 1, False, True, "bfloat16", 3),
             (4, 1, 64, 64, 16, True, True, "float32", 4), (2, 3, 16, 8, 1, False, False, "float32", 5)]
    results = run_interpreted(CHECK, json.dumps(cases))
    assert [r["case"] for r in results] == [list(c) for c in cases]
    for r in results:
        assert all(r[name]["close"] for name in ("q", "k", "v", "g", "beta")), r


def test_kernel_compiles_for_hopper():
    """Triton's compiler types what its interpreter does not: the kernel compiles for sm_90 here, without a GPU."""
    from remote.kernels import conv_gates
    from tests.test_tree_kernel import hopper_ptx

    signature = {**{name: "*bf16" for name in ("bank", "weight", "bias", "b", "a", "q", "k", "v", "beta")},
                 "index": "*i64", "a_log": "*fp32", "dt_bias": "*fp32", "g": "*fp32",
                 **{name: "i32" for name in ("M", "bank_row", "KEY", "VAL", "DK", "HV", "REP", "b_node", "a_node")}}
    for has_index in (True, False):
        constants = {"K": 4, "BC": 256, "HVP": 64, "HAS_INDEX": has_index, "HAS_BIAS": not has_index, "SILU": True}
        assert ".entry" in hopper_ptx(conv_gates._conv_gates_kernel, signature, constants)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="the kernel runs on CUDA")
@pytest.mark.parametrize("key_heads,rep,dk,dv,n", [(4, 1, 64, 64, 16), (4, 1, 64, 64, 1), (16, 3, 128, 128, 33)])
def test_cuda_kernel_equals_the_torch_ops(key_heads, rep, dk, dv, n):
    """The demo's and Qwen3.6-27B's widths on the GPU in bf16, where both round to nearest even: nearly every bf16
    element to the bit (the window's sums may add in another order), g to float32 rounding."""
    import torch

    from remote.kernels import conv_gates as kernel
    from remote.models.gdn import conv_gates

    g = torch.Generator(device="cuda").manual_seed(n)
    hv = key_heads * rep
    key_dim, value_dim, width = key_heads * dk, hv * dv, 4
    cuda = dict(device="cuda", dtype=torch.bfloat16, generator=g)
    bank = torch.randn(2 * key_dim + value_dim, width + n, **cuda)
    index = torch.randint(0, width + n, (n, width), device="cuda", generator=g) if n > 1 else None
    weight, bias = torch.randn(bank.shape[0], width, **cuda), torch.randn(bank.shape[0], **cuda)
    fused = torch.randn(1, n, 2 * hv, **cuda)
    b, a = fused[..., :hv], fused[..., hv:]
    a_log, dt_bias = (torch.randn(hv, device="cuda", generator=g) for _ in range(2))
    args = (bank, index, weight, bias, b, a, a_log, dt_bias, (key_dim, value_dim, dk, dv, rep), "silu")
    for got, want in zip(kernel.conv_gates(*args), conv_gates(*args)):
        assert got.shape == want.shape and got.dtype == want.dtype
        if want.dtype == torch.float32:     # g: softplus by another formula
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
        else:
            assert torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2)
            assert (got == want).float().mean() >= 0.99
