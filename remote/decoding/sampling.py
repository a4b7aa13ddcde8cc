"""Token choice from target logits. Temperature 0 is argmax; temperature > 0 samples softmax(logits / T) with the
caller's seeded `torch.Generator`, one independent draw per row. Nothing else (no top-p / top-k): the methods are
compared with AR at exactly this distribution.
"""
from __future__ import annotations

import torch


def sample(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """logits [N, V] -> token ids [N]."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)
