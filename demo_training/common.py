"""Small shared pieces: timestamped logging, the learning-rate schedule, seeding, sizes on disk."""
from __future__ import annotations

import math
import os
import random
import time
from pathlib import Path

import torch

_START = time.time()


def log(message: str) -> None:
    """One progress line on stdout, flushed, with wall-clock time and seconds since start."""
    print(f"[{time.strftime('%H:%M:%S')} +{time.time() - _START:6.1f}s] {message}", flush=True)


def elapsed() -> float:
    return time.time() - _START


def lr_at(step: int, total: int, peak: float, warmup: int, floor: float = 0.1) -> float:
    """Linear warm-up over `warmup` steps, then cosine from `peak` down to `floor * peak` at `total`."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)          # seeds CUDA too


def dir_bytes(path: str | os.PathLike) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def autocast(device: torch.device):
    """bf16 autocast on CUDA; plain float32 on CPU (the smoke run), where bf16 would only be slower."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


def adamw(model: torch.nn.Module, lr: float, weight_decay: float, device: torch.device) -> torch.optim.AdamW:
    """AdamW (0.9, 0.95); weight decay on matrices only (not on norms, biases, A_log, dt_bias, conv kernels)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim == 2]
    rest = [p for p in params if p.ndim != 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=device.type == "cuda")


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


class StepWindow:
    """Timing of the steps between two progress lines: how many they were, ms per step, seconds left."""

    def __init__(self, steps: int):
        self.steps, self.start = steps, time.time()

    def close(self, done: int, log_every: int) -> tuple[int, float, float]:
        count = done % log_every or log_every
        now = time.time()
        ms = 1000 * (now - self.start) / count
        self.start = now
        return count, ms, (self.steps - done) * ms / 1000
