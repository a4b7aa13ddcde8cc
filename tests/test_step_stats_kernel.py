"""The step-stats kernels (remote.kernels.step_stats) against their torch definition (`torch_miss_stats`), bit for
bit: run by Triton's interpreter on the CPU (a subprocess: the interpreter is chosen when Triton is imported), on
CUDA where there is one, and compiled for sm_90 here. Inputs: ties everywhere (logits drawn from a few values), the
target's token tied with the row's maximum, every rank 1, nothing accepted, every predicted depth accepted, path
longer and shorter than the drafter's rows, -inf and NaN logits, target tokens outside a reduced draft vocabulary
(-1), fp32 / bf16 / fp16."""
from __future__ import annotations


import pytest
import torch

from tests.interpreted import run_interpreted

pytest.importorskip("triton")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def case(seed: int, height: int, depth: int, vocab: int, dtype: str, kind: str):
    """(samples, path, accepted, draft_logits) of a made-up step. kind: "random" (the target's token anywhere),
    "top" (the drafter's top token at every depth: all ranks 1), "tied_top" (the top token, its score shared by
    others), "special" (-inf and NaN logits, NaN at some target tokens), "outside" (about half the nodes' tokens
    outside a reduced draft vocabulary: -1, ranked after every finite logit)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randint(-3, 4, (depth, vocab), generator=g).float() * 0.5    # few values: many ties
    nodes = 3 * height + 1
    samples = torch.randint(0, vocab, (nodes,), generator=g)
    accepted = int(torch.randint(0, height, (), generator=g))
    path = torch.randperm(nodes, generator=g)[:height]
    path[accepted + 1:] = path[accepted]                        # padded with its last node, as `accept` pads it
    rows = min(height, depth)
    chosen = samples[path[:rows]]
    if kind in ("top", "tied_top"):
        logits[torch.arange(rows), chosen] = logits.max() + (0.0 if kind == "tied_top" else 1.0)
    if kind == "special":
        logits[logits == -1.5] = float("-inf")
        logits[logits == 1.5] = float("nan")
        logits[0, chosen[0]] = float("nan")
    if kind == "outside":
        samples[torch.rand(nodes, generator=g) < 0.5] = -1
        logits[logits == -1.5] = float("-inf")
    return samples, path, torch.tensor(accepted), logits.to(DTYPES[dtype])


def cases() -> list[tuple]:
    """(seed, height, depth, vocab, dtype, kind), with `accepted` drawn per seed (0 and `rows` both come up)."""
    out = []
    for seed in range(24):
        height = 1 + seed % 9
        depth = max(1, height - 1 + seed % 3 - 1)             # the drafter predicts fewer, as many or more rows
        kind = ("random", "top", "tied_top", "special", "outside")[seed % 5]
        out.append((seed, height, depth, 37 + 11 * seed, list(DTYPES)[seed % 3], kind))
    return out


CHECK = r"""
import json, sys
import torch
from remote.kernels import step_stats
from tests.test_step_stats_kernel import case, cases

out = []
for args in cases():
    samples, path, accepted, logits = case(*args)
    want = step_stats.torch_miss_stats(samples, path, accepted, logits)
    got = step_stats.miss_stats_interpreted(samples, path, accepted, logits, chunk=16)   # several chunks a row
    out.append({"case": args, "want": want.tolist(), "got": got.tolist(), "accepted": int(accepted),
                "rows": min(path.shape[0], logits.shape[0])})
print(json.dumps(out))
"""


def test_interpreted_kernels_equal_the_torch_stats():
    results = run_interpreted(CHECK)
    assert len(results) == len(cases())
    for r in results:
        assert r["got"] == r["want"], r
    # the edge cases the inputs are meant to reach: nothing accepted, every predicted depth accepted and no miss,
    # a miss below the accepted depth (a sibling taken) and at it (the walk's end), a rank above 1
    assert any(r["accepted"] == 0 for r in results)
    assert any(r["accepted"] >= r["rows"] and r["want"][1] == 0 for r in results)
    assert any(r["want"][3] == 1 for r in results) and any(r["want"][1] > 0 and r["want"][3] == 0 for r in results)
    assert any(r["want"][2] > 1 for r in results)
    # a token outside the draft vocabulary at the first miss ranks after every finite logit of its row
    assert any(r["case"][5] == "outside" and r["want"][2] > r["case"][3] // 2 for r in results)


def test_cpu_runs_the_torch_ops():
    """Off CUDA `miss_stats` is the definition itself (what the decoding loop's CPU tests exercise)."""
    from remote.kernels import step_stats

    samples, path, accepted, logits = case(*cases()[1])
    assert not step_stats.available(logits.device)
    assert torch.equal(step_stats.miss_stats(samples, path, accepted, logits),
                       step_stats.torch_miss_stats(samples, path, accepted, logits))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the kernels run on CUDA")
@pytest.mark.parametrize("vocab", [4096, 151936])
def test_cuda_kernels_equal_the_torch_stats(vocab):
    """The runner's vocabularies (the demo's and Qwen's), eagerly, in a CUDA graph and under torch.compile."""
    from remote.kernels import step_stats

    for seed, height, depth, _, dtype, kind in cases():
        samples, path, accepted, logits = case(seed, height, depth, vocab, dtype, kind)
        want = step_stats.torch_miss_stats(samples, path, accepted, logits)
        got = step_stats.miss_stats(samples.cuda(), path.cuda(), accepted.cuda(), logits.cuda())
        assert torch.equal(got.cpu(), want), (seed, height, depth, dtype, kind)
    inputs = [t.cuda() for t in case(5, 16, 15, vocab, "bfloat16", "top")]
    want = step_stats.torch_miss_stats(*[t.cpu() for t in inputs])
    compiled = torch.compile(step_stats.miss_stats, fullgraph=True)
    assert torch.equal(compiled(*inputs).cpu(), want)
    step_stats.miss_stats(*inputs)                           # compile the kernels before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step_stats.miss_stats(*inputs)
    graph.replay()
    assert torch.equal(out.cpu(), want)


def test_kernels_compile_for_hopper():
    """Triton's compiler types what its interpreter does not: both kernels compile for sm_90 here, without a GPU."""
    from remote.kernels import step_stats
    from tests.test_tree_kernel import hopper_ptx

    count = {"logits": "*bf16", "stride": "i32", "samples": "*i64", "path": "*i64", "counts": "*i32", "V": "i32",
             "chunks": "i32"}
    stats = {"counts": "*i32", "accepted": "*i64", "out": "*i64", "rows": "i32", "chunks": "i32", "nodes": "i32"}
    assert ".entry" in hopper_ptx(step_stats._count_kernel, count, {"CHUNK": step_stats.CHUNK})
    assert ".entry" in hopper_ptx(step_stats._stats_kernel, stats, {"RP": 16, "CP": 64})
