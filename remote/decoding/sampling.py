"""Token choice from target logits. Temperature 0 is argmax (Triton kernels on CUDA: remote.kernels.argmax);
temperature > 0 samples softmax(logits / T), one independent draw per row, from the caller's seeded
`torch.Generator` (None: the device's default generator, which a captured CUDA graph advances at every replay).
Nothing else (no top-p / top-k): the methods are compared with AR at exactly this distribution.

How: inverse CDF, one uniform draw per row against the row's cumulative probabilities (a token of probability 0 is
never chosen: its cumulative sum equals the one before it). No host read and no data-dependent shape, so a sampled
step can be captured as a CUDA graph (remote.decoding.graph), and the eager loop and the graph decoder draw the same
numbers in the same order. On CUDA the same inverse CDF runs as two Triton launches (remote.kernels.sample_rows),
which read the logits about twice instead of writing and scanning vocabulary-wide intermediates.
"""
from __future__ import annotations

import torch

from ..kernels import sample_rows
from ..kernels.argmax import argmax_rows


def sample(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """logits [N, V] -> token ids [N]."""
    if temperature <= 0:
        return argmax_rows(logits)
    u = torch.rand(logits.shape[0], 1, device=logits.device, generator=generator)             # [N, 1] in [0, 1)
    if sample_rows.ENABLED and sample_rows.available(logits.device) and not torch.compiler.is_compiling():
        return sample_rows.sample_rows(logits, temperature, u)
    return inverse_cdf(logits, temperature, u)


def inverse_cdf(logits: torch.Tensor, temperature: float, u: torch.Tensor) -> torch.Tensor:
    """The torch ops: logits [N, V] and u [N, 1] uniform in [0, 1) -> [N]."""
    cum = torch.softmax(logits.float() / temperature, dim=-1).cumsum(dim=-1)                 # [N, V]
    picked = torch.searchsorted(cum, u * cum[:, -1:], right=True).squeeze(-1)
    # u within 2^-24 of 1 can round u * total up to the total: the last token then, not an index past it
    return picked.clamp_(max=cum.shape[-1] - 1)


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)
