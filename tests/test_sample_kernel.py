"""Sampling at temperature > 0 on CUDA (remote.kernels.sample_rows) against the inverse CDF it replaces: each draw
lands in the chosen token's interval of the row's cumulative distribution (computed in float64, up to float32
rounding), never on a token of probability 0; on CUDA also many draws of one row fit its softmax (chi-square, which
tells a sharper softmax apart), in a CUDA graph too. Run by Triton's interpreter on the CPU (a subprocess) and on
CUDA where there is one."""
from __future__ import annotations

import pytest
import torch

from tests.interpreted import run_interpreted

pytest.importorskip("triton")
stats = pytest.importorskip("scipy.stats")

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
EDGES = (0.0, 1.0 - 2.0 ** -24)   # the first and the last uniform torch.rand can return


def sample_case(seed: int):
    """(logits [N, V], temperature, u [N]): peaked and flat rows, -inf runs (masked tokens, a whole chunk of them),
    draws at both ends of [0, 1)."""
    g = torch.Generator().manual_seed(seed)
    rows, vocab = 1 + seed % 9, (5, 100, 1025, 4097, 9000)[seed % 5]
    logits = torch.randn(rows, vocab, generator=g) * (1, 4, 12)[seed % 3]
    if seed % 2:
        logits[:, : vocab // 2] = float("-inf")
    if rows > 1:
        logits[1, :] = float("-inf")
        logits[1, vocab - 1] = 3.0               # one token left: always it
    u = torch.rand(rows, generator=g)
    u[0] = EDGES[seed % 2]
    return logits.to(DTYPES[seed % 3]), (0.5, 1.0, 2.0)[seed % 3], u


def interval_misses(logits: torch.Tensor, temperature: float, u: torch.Tensor, got: torch.Tensor) -> list:
    """Rows whose token is outside the draw's interval of the exact CDF (beyond float32 rounding) or has
    probability 0."""
    p = torch.softmax(logits.double() / temperature, dim=-1)
    cum = p.cumsum(-1)
    misses = []
    for r, k in enumerate(got.tolist()):
        low = float(cum[r, k - 1]) if k else 0.0
        if not (p[r, k] > 0 and low - 1e-5 <= float(u[r]) <= float(cum[r, k]) + 1e-5):
            misses.append((r, k, float(u[r]), low, float(cum[r, k])))
    return misses


def fit_p(got: torch.Tensor, row: torch.Tensor) -> float:
    """Chi-square p of draws `got` [n] against the softmax of `row` [1, V]."""
    n, probs = got.numel(), torch.softmax(row[0].double(), -1)
    counts = torch.bincount(got.cpu(), minlength=probs.numel()).double()
    keep = probs * n >= 5
    obs = torch.cat([counts[keep], counts[~keep].sum()[None]])
    exp = torch.cat([probs[keep] * n, (probs[~keep] * n).sum()[None]])
    return float(stats.chisquare(obs.numpy(), exp.numpy()).pvalue)


CHECK = r"""
import json
import torch
from remote.kernels import sample_rows
from tests.test_sample_kernel import interval_misses, sample_case

out = {"misses": [], "draws": 0}
for seed in range(20):
    logits, temperature, u = sample_case(seed)
    got = sample_rows.sample_rows_interpreted(logits, temperature, u, chunk=1024 if seed % 2 else 4096)
    out["misses"] += interval_misses(logits, temperature, u, got)
    out["draws"] += got.numel()
print(json.dumps(out))
"""


def test_interpreted_kernels_draw_from_the_rows_distribution():
    results = run_interpreted(CHECK)
    assert results["draws"] > 80 and results["misses"] == [], results["misses"]


def test_cpu_samples_with_the_torch_ops():
    """Off CUDA `sample` is the inverse CDF in torch ops (what the decoding loop's CPU tests exercise)."""
    from remote.decoding.sampling import sample

    for seed in range(10):
        logits, temperature, _ = sample_case(seed)
        g = torch.Generator().manual_seed(seed)
        u = torch.rand(logits.shape[0], 1, generator=torch.Generator().manual_seed(seed)).view(-1)
        assert interval_misses(logits, temperature, u, sample(logits, temperature, g)) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the kernels run on CUDA")
def test_cuda_kernels_draw_from_the_rows_distribution():
    """Eagerly, at Qwen's vocabulary (38 chunks a row), and through `sample` in a CUDA graph whose replays draw
    anew."""
    from remote.decoding.sampling import sample
    from remote.kernels import sample_rows

    for seed in range(20):
        logits, temperature, u = sample_case(seed)
        got = sample_rows.sample_rows(logits.cuda(), temperature, u.cuda()).cpu()
        assert interval_misses(logits, temperature, u, got) == [], seed
    logits = torch.randn(33, 151936, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16) * 3
    u = torch.rand(33, generator=torch.Generator().manual_seed(0))
    got = sample_rows.sample_rows(logits.cuda(), 1.0, u.cuda()).cpu()
    assert interval_misses(logits, 1.0, u, got) == []
    row = torch.randn(1, 40, generator=torch.Generator().manual_seed(5)) * 2
    many = row.expand(3000, -1).contiguous().cuda()
    u = torch.rand(3000, generator=torch.Generator().manual_seed(1)).cuda()
    assert fit_p(sample_rows.sample_rows(many, 1.0, u), row) > 0.01
    assert fit_p(sample_rows.sample_rows(many * 1.3, 1.0, u), row) < 1e-6   # the check tells a sharper one apart

    torch.cuda.manual_seed(0)
    sample(many, 1.0, None)                            # warm-up: compiles the kernels outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        drawn = sample(many, 1.0, None)
    replays = []
    for _ in range(2):
        graph.replay()
        replays.append(drawn.clone())
    assert not torch.equal(replays[0], replays[1])     # each replay draws new numbers
    assert fit_p(replays[0], row) > 0.01
