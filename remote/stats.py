"""Intervals and percentiles over prompts, in torch (the runner's own dependency) on the CPU in float64.

Contract: `ratio_interval(num, den, seed)` is the 95% percentile-bootstrap interval of sum(num) / sum(den) with
prompts resampled with replacement: num[i] and den[i] belong to prompt i and are always drawn together, so a paired
statistic (AR's TPOT over the method's, per prompt) keeps its pairing, and a pooled one (committed tokens over
verify steps) its weights. The resamples are drawn from a generator seeded with `seed`: the same values and seed
give the same interval. None with fewer than two prompts (no spread to resample). `percentile(values, q)` is
the q-th percentile with linear interpolation between order statistics (numpy's default).
Non-goals: bias-corrected (BCa) intervals, intervals over repeats (repeats are spread, reported as such).
"""
from __future__ import annotations

import torch

RESAMPLES = 10_000
LEVEL = 0.95
_CHUNK = 1 << 20     # indices drawn per batch of resamples: bounded memory for thousands of prompts


def ratio_interval(num: list[float], den: list[float], seed: int) -> tuple[float, float] | None:
    """(low, high) of the bootstrap distribution of sum(num[idx]) / sum(den[idx]), idx drawn over prompts."""
    n = len(num)
    if n != len(den):
        raise ValueError(f"paired values need one of each per prompt; got {n} and {len(den)}")
    if n < 2:
        return None
    a = torch.tensor(num, dtype=torch.float64)
    b = torch.tensor(den, dtype=torch.float64)
    generator = torch.Generator().manual_seed(seed)
    per_batch = max(1, _CHUNK // n)
    ratios = []
    for start in range(0, RESAMPLES, per_batch):
        idx = torch.randint(n, (min(per_batch, RESAMPLES - start), n), generator=generator)
        ratios.append(a[idx].sum(dim=1) / b[idx].sum(dim=1))
    ratios = torch.cat(ratios)
    tail = (1 - LEVEL) / 2
    low, high = torch.quantile(ratios, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
    return low, high


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    below = int(rank)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (rank - below)
