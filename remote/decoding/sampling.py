"""Token choice from target logits. Temperature 0 is argmax (Triton kernels on CUDA: remote.kernels.argmax);
temperature > 0 samples softmax(logits / T), one independent draw per row, from the caller's seeded
`torch.Generator` (None: the device's default generator, which a captured CUDA graph advances at every replay).
Nothing else (no top-p / top-k): the methods are compared with AR at exactly this distribution.

How: inverse CDF, one uniform draw per row against the row's cumulative probabilities (a token of probability 0 is
never chosen: its cumulative sum equals the one before it). No host read and no data-dependent shape, so a sampled
step can be captured as a CUDA graph (remote.decoding.graph), and the eager loop and the graph decoder draw the same
numbers in the same order.
"""
from __future__ import annotations

import torch

from ..kernels.argmax import argmax_rows


def sample(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """logits [N, V] -> token ids [N]."""
    if temperature <= 0:
        return argmax_rows(logits)
    cum = torch.softmax(logits.float() / temperature, dim=-1).cumsum(dim=-1)                 # [N, V]
    u = torch.rand(cum.shape[0], 1, device=cum.device, generator=generator)                  # [N, 1] in [0, 1)
    picked = torch.searchsorted(cum, u * cum[:, -1:], right=True).squeeze(-1)
    # u within 2^-24 of 1 can round u * total up to the total: the last token then, not an index past it
    return picked.clamp_(max=cum.shape[-1] - 1)


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)
