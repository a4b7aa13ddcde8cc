"""One-kernel RMSNorm while decoding steps are captured.

Why: transformers' Qwen3 / Llama-style RMSNorm runs six kernels per call (cast, pow, mean, add, rsqrt, two
multiplies) and a decoding step calls it 4 times per layer: measured on an H200 (bench/bench_kernels.py) it costs
11-15 us per call inside a CUDA graph against 2 us for `F.rms_norm`'s fused kernel, about a third of a demo
target's AR step. Patching the modules only while a step is warmed up and captured (remote.graph_decode) leaves
every other forward (prefill, the eager loop, stock `generate`) on transformers' own code.

Contract: `fused_norms(*modules)` is a context manager; inside it, every RMSNorm of the known classes under
`modules` computes `F.rms_norm(x, weight, eps)`: the same normalisation in float32 with the weight applied before
the one rounding to the input dtype (transformers rounds, then multiplies): equal up to one rounding. Classes
with another formula (Qwen3.5's `1 + weight`, gated norms) are left alone.
"""
from __future__ import annotations

import contextlib
import types

import torch
from torch.nn import functional as F

FUSABLE = ("Qwen3RMSNorm", "Qwen2RMSNorm", "LlamaRMSNorm", "MistralRMSNorm")


def _fused(self, hidden_states: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(hidden_states, (hidden_states.shape[-1],), self.weight, self.variance_epsilon)


@contextlib.contextmanager
def fused_norms(*modules: torch.nn.Module | None):
    norms = [m for root in modules if root is not None for m in root.modules() if type(m).__name__ in FUSABLE]
    for norm in norms:
        norm.forward = types.MethodType(_fused, norm)
    try:
        yield len(norms)
    finally:
        for norm in norms:
            del norm.forward                     # back to the class's own forward
