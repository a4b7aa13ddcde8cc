"""The one-kernel masked attention (remote.kernels.attention) against torch's SDPA: run by Triton's interpreter on
the CPU (a subprocess: the interpreter is chosen when the kernel module is imported), compiled for sm_90 here, and
on CUDA through the op the captured steps call."""
from __future__ import annotations

import json

import pytest
import torch

from tests.interpreted import run_interpreted

pytest.importorskip("triton")

CHECK = r"""
import json, sys
import torch
from remote.kernels import attention as attention_kernel
from tests.test_attention_kernel import case, reference

out = []
for spec in json.loads(sys.argv[1]):
    q, k, v, mask, scale = case(*spec)
    got = attention_kernel.attention_interpreted(q, k, v, mask, scale)
    error = (got - reference(q, k, v, mask, scale)).abs().max().item()
    blocks = -(-q.shape[1] * q.shape[2] // k.shape[1] // attention_kernel.BLOCK_M)       # stacked query blocks
    splits = attention_kernel._splits(k.shape[2], k.shape[1] * blocks)[0]
    out.append({"case": spec, "shape": list(got.shape), "error": error, "splits": splits})
print(json.dumps(out))
"""
# (heads, kv_heads, queries, rows, head_dim, mask kind, seed): a tree verify, an AR query, a drafter block whose
# one-row mask is shared by its queries, MHA, rows not a multiple of the K/V block, an additive mask, and a static
# cache mostly unwritten (NaN there: the blocks no query sees must not be read at all), bool and additive
CASES = [(4, 2, 9, 70, 16, "tree", 0), (4, 2, 1, 40, 16, "prefix", 1), (4, 2, 8, 30, 32, "row", 2),
         (2, 2, 5, 64, 16, "tree", 3), (8, 2, 3, 129, 16, "additive", 4), (4, 2, 9, 300, 16, "reserved", 7),
         (4, 2, 1, 200, 16, "reserved-additive", 8)]
WRITTEN = 50     # "reserved" cases: rows written; NaN from the first K/V block (kernel's BLOCK_N = 64) past them


def case(heads, kv_heads, queries, rows, dim, kind, seed, dtype=torch.float32, device="cpu"):
    """Inputs laid out as a captured step has them: q a transposed view of [1, Q, Hq, D], K/V cache rows beyond
    the committed ones, and the step's mask."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, queries, heads, dim, generator=g).transpose(1, 2)
    k, v = (torch.randn(1, kv_heads, rows, dim, generator=g) for _ in range(2))
    start = rows - queries - 3 if not kind.startswith("reserved") else WRITTEN - queries
    if kind.startswith("reserved"):
        k[:, :, 64:], v[:, :, 64:] = float("nan"), float("nan")
    cols = torch.arange(rows)
    visible = cols[None] < start + 1 + torch.arange(queries)[:, None]                 # a chain's causal rows
    if kind != "prefix" and kind != "row":          # each node sees the prefix and some of the tree
        some = (torch.rand(queries, rows, generator=g) < 0.5) & (cols[None] < start + queries)
        visible = (cols[None] < start) | some
        visible[torch.arange(queries), start + torch.arange(queries)] = True
    if kind == "row":
        visible = visible[-1:]
    mask = visible if not kind.endswith("additive") else \
        torch.zeros(visible.shape).masked_fill(~visible, torch.finfo(torch.float32).min)
    as_ = dict(dtype=dtype, device=device)
    return q.to(**as_), k.to(**as_), v.to(**as_), mask.to(device), dim ** -0.5


def reference(q, k, v, mask, scale):
    groups = q.shape[1] // k.shape[1]
    k, v = (x.nan_to_num().repeat_interleave(groups, dim=1) for x in (k, v))      # unwritten rows are masked
    out = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                                           scale=scale)
    return out.transpose(1, 2).to(q.dtype)                            # [1, Q, Hq, D]


def test_interpreted_kernel_equals_sdpa():
    results = run_interpreted(CHECK, json.dumps(CASES))
    assert len(results) == len(CASES)
    for r in results:
        heads, _, queries, _, dim = r["case"][:5]
        assert r["shape"] == [1, queries, heads, dim] and r["error"] < 1e-5, r
    assert {r["splits"] > 1 for r in results} == {True, False}      # the rows split across programs, and not


def test_kernel_compiles_for_hopper():
    from remote.kernels import attention as attention_kernel
    from tests.test_tree_kernel import hopper_ptx

    signature = {"q": "*bf16", "k": "*bf16", "v": "*bf16", "mask": "*u8", "out": "*bf16", "part": "*fp32",
                 "part_acc": "*fp32", "scale": "fp32",
                 **{name: "i32" for name in ("q_len", "kv_len", "groups", "per", "sq_h", "sq_m", "sk_h", "sk_n",
                                             "sv_h", "sv_n", "sm_m", "sm_n", "so_m", "so_h")}}
    for split in (False, True):
        ptx = hopper_ptx(attention_kernel._attention_kernel, signature,
                         {"ADDITIVE": False, "IEEE": False, "D": 64, "BM": 16, "BN": 64, "SPLIT": split})
        assert ".target sm_90" in ptx and "mma" in ptx
    combine = {"part": "*fp32", "part_acc": "*fp32", "out": "*bf16",
               **{name: "i32" for name in ("q_len", "groups", "splits", "so_m", "so_h")}}
    assert ".entry" in hopper_ptx(attention_kernel._combine_kernel, combine, {"D": 64, "BM": 16})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the kernel runs on CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_kernel_equals_sdpa(dtype):
    from remote.kernels import attention as attention_kernel

    for spec in CASES + [(32, 8, 65, 2100, 128, "tree", 5), (16, 2, 129, 600, 64, "tree", 6)]:
        q, k, v, mask, scale = case(*spec, dtype=dtype, device="cuda")
        error = (attention_kernel.attention(q, k, v, mask, scale).float() - reference(q, k, v, mask, scale).float())
        assert error.abs().max().item() < (1e-5 if dtype == torch.float32 else 2e-2), spec
