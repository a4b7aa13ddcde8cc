"""The commit's row moves (remote.kernels.rows) and the greedy token of every row (remote.kernels.argmax) against
their torch definitions, bit for bit: run by Triton's interpreter on the CPU (a subprocess: the interpreter is chosen
when Triton is imported), on CUDA where there is one (eagerly and in a CUDA graph), and compiled for sm_90 here.

Row moves: a move within one cache whose source rows overlap the destination rows (the accepted path of a verify,
padded with its last node), starts as host ints and as device scalars, a strided destination (the drafter context's
rows), slabs of several column blocks. Argmax: ties (the first index wins), NaN (the first NaN wins), -inf rows,
rows of one chunk and of several, fp32 / bf16 / fp16."""
from __future__ import annotations

import pytest
import torch

from tests.interpreted import run_interpreted

pytest.importorskip("triton")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def move_case(seed: int):
    """(cache [..., R, D], start, path) of a made-up commit: path increasing from 0 (a root-to-node path in verify
    index space), padded with its last node."""
    g = torch.Generator().manual_seed(seed)
    height = 1 + seed % 16
    cols = (16, 64, 300, 1280)[seed % 4]                     # 300 and 1280: several column blocks, a ragged one
    lead = ((2, 3), (24,), (1,), (4, 2))[seed % 4]
    start = int(torch.randint(0, 20, (), generator=g))
    nodes = height + int(torch.randint(0, 40, (), generator=g))
    steps = torch.randint(1, 4, (height,), generator=g)
    path = torch.cumsum(steps, 0) - steps[0]                 # 0, then increasing: ancestors come first
    path = path.clamp(max=nodes - 1)
    accepted = int(torch.randint(0, height, (), generator=g))
    path[accepted + 1:] = path[accepted]
    cache = torch.randn(*lead, start + nodes + 3, cols, generator=g).to(torch.bfloat16)
    return cache, start, path


def argmax_case(seed: int):
    g = torch.Generator().manual_seed(seed)
    rows, vocab = 1 + seed % 40, (5, 100, 4096, 4097, 9000)[seed % 5]
    logits = torch.randint(-4, 5, (rows, vocab), generator=g).float()      # few values: ties everywhere
    if seed % 3 == 1:
        logits[0, vocab // 2] = float("nan")
        logits[0, vocab - 1] = float("nan")
        logits[-1] = float("-inf")
    if seed % 3 == 2:
        logits[:, -1] = float("inf")
    return logits.to(list(DTYPES.values())[seed % 3])


CHECK = r"""
import json
import torch
from remote.kernels import argmax, rows
from tests.test_step_glue_kernels import argmax_case, move_case

out = {"moves": [], "argmax": []}
for seed in range(16):
    cache, start, path = move_case(seed)
    want = cache.clone()
    rows.torch_gather_rows(want, start, path, want, start)
    got = cache.clone()
    rows.gather_rows_interpreted(got, torch.tensor(start) if seed % 2 else start, path, got,
                                 torch.tensor(start) if seed % 2 else start)
    # into another tensor's strided rows: features [N, F] -> the first rows of a context [1, B, F]
    features = cache.reshape(-1, cache.shape[-1])[: cache.shape[-2]]
    context = torch.zeros(1, 20, cache.shape[-1], dtype=cache.dtype)
    want_ctx = context.clone()
    rows.torch_gather_rows(features, 0, path, want_ctx[0], 0)
    rows.gather_rows_interpreted(features, 0, path, context[0], 0)
    # taps: a verify's per-layer features [N, D] each, moved as their concatenation's rows, from a device start
    taps = tuple(features * (j + 1) for j in range(1 + seed % 5))
    wide = torch.zeros(1, 20, len(taps) * cache.shape[-1], dtype=cache.dtype)
    want_wide = wide.clone()
    want_wide[0, 3: 3 + path.shape[0]] = torch.cat(taps, dim=-1)[path]
    rows.gather_rows_interpreted(taps, 0, path, wide[0], torch.tensor(3))
    out["moves"].append({"seed": seed, "equal": torch.equal(got, want), "moved": not torch.equal(want, cache),
                         "context": torch.equal(context, want_ctx), "taps": torch.equal(wide, want_wide)})
# a step's K/V [2, Hkv, n, D] into a layer's pair of a store [2L, Hkv, cap, D] at consecutive rows from a device
# start (StaticKV.write), and embedding rows (remote.models.layer_loop.embed)
g = torch.Generator().manual_seed(0)
out["writes"] = []
for n, start in ((1, 0), (1, 37), (32, 5), (64, 0)):
    store = torch.randn(6, 2, 100, 16, generator=g)
    kv = torch.randn(2, 2, n, 16, generator=g)
    want = store.clone()
    want[2:4].index_copy_(2, start + torch.arange(n), kv)
    rows.gather_rows_interpreted(kv, 0, torch.arange(n), store[2:4], torch.tensor([start])[0])
    table, ids = torch.randn(50, 24, generator=g), torch.randint(0, 50, (n,), generator=g)
    embedded = torch.zeros(n, 24)
    rows.gather_rows_interpreted(table, 0, ids, embedded, 0)
    out["writes"].append({"n": n, "kv": torch.equal(store, want), "embed": torch.equal(embedded, table[ids])})
for seed in range(30):
    logits = argmax_case(seed)
    got = argmax.argmax_rows_interpreted(logits, chunk=1024 if seed % 2 else 4096)
    out["argmax"].append({"seed": seed, "got": got.tolist(), "want": logits.argmax(dim=-1).tolist()})
print(json.dumps(out))
"""


def test_interpreted_kernels_equal_their_definitions():
    results = run_interpreted(CHECK)
    for r in results["moves"]:
        assert r["equal"] and r["context"] and r["taps"], r
    assert any(r["moved"] for r in results["moves"])          # some paths really move rows
    assert results["writes"] and all(r["kv"] and r["embed"] for r in results["writes"]), results["writes"]
    for r in results["argmax"]:
        assert r["got"] == r["want"], r


def test_cpu_runs_the_torch_ops():
    """Off CUDA both are their definitions (what the decoding loop's CPU tests exercise)."""
    from remote.kernels import argmax, rows

    cache, start, path = move_case(3)
    want, got = cache.clone(), cache.clone()
    rows.torch_gather_rows(want, start, path, want, start)
    rows.gather_rows(got, torch.tensor(start), path, got, torch.tensor(start))
    assert torch.equal(got, want)
    logits = argmax_case(1)
    assert torch.equal(argmax.argmax_rows(logits), logits.argmax(dim=-1))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the kernels run on CUDA")
def test_cuda_kernels_equal_their_definitions():
    """Eagerly, in a CUDA graph (device-scalar starts), and at Qwen's vocabulary (several chunks a row)."""
    from remote.kernels import argmax, rows

    for seed in range(16):
        cache, start, path = move_case(seed)
        want = cache.clone()
        rows.torch_gather_rows(want, start, path, want, start)
        got = cache.cuda()
        rows.gather_rows(got, start, path.cuda(), got, start)
        assert torch.equal(got.cpu(), want), seed
        slabs = cache.reshape(-1, *cache.shape[-2:]).cuda()
        taps = tuple(slabs[j] for j in range(min(slabs.shape[0], rows.MAX_TAPS)))
        wide = torch.zeros(cache.shape[-2] + 4, len(taps) * cache.shape[-1], dtype=cache.dtype, device="cuda")
        rows.gather_rows(taps, 0, path.cuda(), wide, torch.tensor(2, device="cuda"))
        assert torch.equal(wide[2: 2 + path.shape[0]].cpu(), torch.cat(taps, dim=-1)[path.cuda()].cpu()), seed
    for seed in range(30):
        logits = argmax_case(seed)
        assert torch.equal(argmax.argmax_rows(logits.cuda()).cpu(), logits.argmax(dim=-1)), seed
    logits = torch.randn(33, 151936, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    assert torch.equal(argmax.argmax_rows(logits.cuda()).cpu(), logits.argmax(dim=-1))
    cache, start, path = move_case(7)
    want = cache.clone()
    rows.torch_gather_rows(want, start, path, want, start)
    got, at, path = cache.cuda(), torch.tensor(start, device="cuda"), path.cuda()
    logits = logits.cuda()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        rows.gather_rows(got, at, path, got, at)
        tokens = argmax.argmax_rows(logits)
    graph.replay()
    assert torch.equal(got.cpu(), want)
    assert torch.equal(tokens.cpu(), logits.argmax(dim=-1).cpu())


def test_kernels_compile_for_hopper():
    """Triton's compiler types what its interpreter does not: the kernels compile for sm_90 here, without a GPU."""
    from remote.kernels import argmax, rows
    from tests.test_tree_kernel import hopper_ptx

    move = {"src": "*bf16", **{f"tap{j}": "*bf16" for j in range(1, rows.MAX_TAPS)}, "dst": "*bf16", "path": "*i64",
            "src_base": "*i64", "dst_base": "*i64",
            **{name: "i32" for name in ("src_off", "dst_off", "H", "D", "src_slab", "src_row", "dst_slab",
                                        "dst_row")}}
    for pointers, taps in ((True, 1), (False, 1), (True, 3), (False, rows.MAX_TAPS)):
        constants = {"HP": 16, "BD": 256, "SRC_PTR": pointers, "DST_PTR": pointers, "TAPS": taps}
        assert ".entry" in hopper_ptx(rows._gather_rows_kernel, move, constants)
    chunk = {"logits": "*bf16", "stride": "i32", "best": "*fp32", "where": "*i32", "out": "*i64", "V": "i32",
             "chunks": "i32"}
    for direct in (True, False):
        assert ".entry" in hopper_ptx(argmax._chunk_kernel, chunk, {"CHUNK": argmax.CHUNK, "DIRECT": direct})
    merge = {"best": "*fp32", "where": "*i32", "out": "*i64", "chunks": "i32", "V": "i32"}
    assert ".entry" in hopper_ptx(argmax._merge_kernel, merge, {"CP": 64})
